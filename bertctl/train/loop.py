"""The one training loop, shared by pretraining and fine-tuning.

    result = train(model, data, LoopSettings(steps=1000, batch_size=256, lr=1e-4), work_dir)

Both stages hand in a model whose forward returns {"loss": ...} when given labels, and a data
source (see `DataSource`); they differ only in head, data and metrics. The loop owns everything
else: AdamW with BERT's schedule, gradient accumulation, mixed precision, data parallelism under
torchrun, logging to metrics.jsonl, evaluation and best-weight selection, and checkpoints that
resume bit-exactly.

Determinism is by construction rather than by replay: the examples of global step t are a
function of (seed, epoch, position) only (order.py), the learning rate a function of t only, and
a checkpoint holds the model, the optimizer and every RNG. So a resumed run computes the same
numbers an uninterrupted one would, and under DDP every rank knows every global batch without
communication.

`Trainer` keeps a run's state in plain attributes and reads top to bottom as the run goes:
`__init__` (geometry, model, optimizer), `resume` (or start fresh), then `run`: per step
`load_step`, `train_step`, `log`, `evaluate`, `save`; finally the weights to return.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertctl import hardware
from bertctl.contract import signals
from bertctl.data.collate import without_full_mask
from bertctl.errors import BertctlError
from bertctl.step_scope import StepTargets, step_targets
from bertctl.train import checkpoint as ckpt
from bertctl.train.compiling import CompileChoice
from bertctl.train.encoders import attention_policies, set_checkpointing
from bertctl.train import distributed as dist
from bertctl.train.plan import halved, plan_batch
from bertctl.train.optim import (decay_steps, lr_at, lr_at_share, make_optimizer, set_lr,
                                 warmup_steps)
from bertctl.train.averaging import WeightAverage
from bertctl.train.order import BatchOrder, DataSource, lengths_of
from bertctl.train.records import (METRICS_FILE, Best, Interval, Loaded, TrainingDiverged,
                                   TrainResult, Unread, append_jsonl, count_tokens, plain,
                                   read_history, rewrite_jsonl, target_positions)
from bertctl.train.settings import LoopSettings

Evaluate = Callable[[nn.Module], dict[str, Any]]
StepMetrics = Callable[[dict[str, Any], dict[str, Any]], dict[str, tuple[Any, Any]]]


def train(model: nn.Module, train_data: DataSource, settings: LoopSettings, work_dir: str | Path,
          evaluate: Evaluate | None = None, select: tuple[str, str] | None = None,
          on_log: Callable[[dict[str, Any]], None] | None = None,
          step_metrics: StepMetrics | None = None,
          optimizer_state: Path | None = None) -> TrainResult:
    """Train `model` on `train_data`; resumes from `work_dir`'s newest checkpoint if there is one.

    work_dir (shared by all ranks; rank 0 writes) receives metrics.jsonl (one JSON record per
    line: "split" "train" every log_every steps with the interval's mean loss and grad_norm, the
    lr, tokens_per_s, examples_per_s and the step metrics; "split" "validation" per evaluation),
    checkpoints/step-XXXXXXXX/ (see checkpoint.py) and, with `select`, best/model.safetensors.

    evaluate(model) -> metrics: called on every rank (it may shard the data and reduce with
        `distributed.all_reduce_sum`, or evaluate everything; all ranks must return the same
        numbers), with the unwrapped model in eval mode and under no_grad; it runs its own
        precision (the evaluation functions take it), so the loop adds no autocast.
    select: (metric key, "max" | "min") keeps the best evaluated weights in work_dir/best/ and
        returns the model holding them; without it the model holds the final weights.
    on_log(record): rank 0 only, for every record of metrics.jsonl (train/sinks/: the console,
        TensorBoard, a tracker) and for "resume" (step, path), "plan" (steps or budget_s) and "note" (text: a batch
        fitted to a budget or to memory) records, which it does not hold.
    step_metrics(outputs, batch) -> {name: (numerator, denominator)}: called after each
        micro-batch's forward (no_grad); numerators and denominators are summed over
        micro-batches, steps of the log interval and ranks, and `name` is logged as their
        ratio (e.g. MLM accuracy = (correct, predicted)). Tensors are fine (no sync needed).
    optimizer_state: the optimizer state a fresh run starts from (an earlier phase's, saved by
        torch.save of its state_dict): a continued schedule keeps its moment estimates.
    """
    try:
        trainer = Trainer(model, train_data, settings, Path(work_dir), evaluate, select, on_log,
                          step_metrics)
        trainer.optimizer_state = optimizer_state
        trainer.resume()
        return trainer.run()
    finally:   # the attention mode was this run's: the model then computes as loaded afresh
        for policy in attention_policies(model):
            policy.configure()


class Trainer:
    """One training run: its fixed geometry (set up once) and its changing state (`step`,
    `interval`, `best`, `last_eval`, `history`), which a checkpoint saves and `resume` restores."""

    def __init__(self, model: nn.Module, data: DataSource, settings: LoopSettings,
                 work_dir: Path, evaluate: Evaluate | None = None,
                 select: tuple[str, str] | None = None,
                 on_log: Callable[[dict[str, Any]], None] | None = None,
                 step_metrics: StepMetrics | None = None):
        s = self.s = settings
        if select is not None and (evaluate is None or select[1] not in ("max", "min")):
            raise BertctlError("train: select needs an evaluate function and a mode 'max' or "
                               "'min'")
        if s.patience is not None and select is None:
            raise BertctlError(f"--patience {s.patience}: it stops on the dev metric the run "
                               f"selects its best weights by, and this run has none (give a "
                               f"dev set: --dev)")
        self.data, self.work_dir = data, work_dir
        self.evaluate_fn, self.select, self.on_log = evaluate, select, on_log
        self.step_metrics = step_metrics
        self.info = dist.init(s.device)
        self.device, self.world, self.rank = self.info.device, self.info.world_size, self.info.rank
        hardware.check_precision(s.precision, self.device)
        self.model = model.to(self.device)
        # Before the measurement steps below, which time attention too.
        self.attention = attention_policies(self.model)
        for policy in self.attention:
            policy.configure(s.attention, timing=self.world == 1)
        # The geometry: a global batch of micro-batches dealt round-robin to ranks, each as
        # large as the memory allows, measured as the run will run (plan.py).
        set_checkpointing(self.model, s.gradient_checkpointing)
        self.plan = plan_batch(self.model, data, s, self.device, self.world, work_dir,
                               on_log if self.info.is_main else None)
        self.order = BatchOrder(len(data), self.plan.batch_size, s.seed,
                                lengths_of(data) if s.group_by_length else None)
        # A time budget ends the run when it is spent; until then the step count is open.
        self.budget = s.time_budget
        run_steps = (s.steps if s.steps is not None else 10 ** 15 if self.budget is not None
                     else max(1, round(s.epochs * self.order.steps_per_epoch)))
        self.end_step = s.start_step + run_steps
        self.order_start = s.start_step if s.order_start is None else s.order_start
        self.total_steps = s.total_steps if s.total_steps is not None else self.end_step
        if self.total_steps < self.end_step:   # (a budget's step count is open: none to name)
            raise BertctlError(f"train settings: total_steps {self.total_steps} " + (
                "lays the schedule over steps, time_budget over time: give one" if self.budget
                else f"is before this run's last step {self.end_step} (start_step "
                f"{s.start_step} + {run_steps})"))
        self.warmup = warmup_steps(s.warmup, self.total_steps)
        self.decay = (decay_steps(s.decay, self.total_steps, self.warmup)
                      if s.schedule == "wsd" and self.budget is None else 1)
        self.last_step = self.end_step

        # The model, the optimizer and loss scaling.
        self.model.train()
        set_checkpointing(self.model, s.gradient_checkpointing)
        self.compiler = CompileChoice(s.compile, self.model, self.device)
        self.optimizer = make_optimizer(self.model, s.lr, s.weight_decay, tuple(s.betas), s.eps,
                                        s.optimizer, s.layer_decay)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=s.precision == "fp16")
        self.average = WeightAverage(self.model, s.ema) if s.ema is not None else None
        self.data_key = {"num_examples": len(data), "batch_size": self.plan.batch_size,
                         "seed": s.seed,
                         "group_by_length": s.group_by_length, "start_step": s.start_step}
        if self.order_start != s.start_step:   # (keyed only then: older checkpoints resume)
            self.data_key["order_start"] = self.order_start

        # The run's state.
        self.step, self.interval, self.best = s.start_step, Interval(), Best()
        self.unread = Unread()   # the steps since the last read of the device
        self.updating = False    # in a step's update (past its backward)
        self.halvings: list[dict[str, int]] = []   # micro-batches halved after out of memory
        self.last_eval, self.history = None, []   # (the last validation record; every record)
        self.resumed_from: int | None = None
        self.stopped_by_patience: dict[str, int] | None = None
        self.elapsed = 0.0   # seconds spent in the loop, by the ranks' mean clock
        self.ddp = self.model
        self.optimizer_state: Path | None = None   # (train() sets it: a phase continued)

    # -- setup and resume

    def resume(self) -> None:
        """Continue from the work directory's checkpoint, or start fresh; then open the logs."""
        s, info = self.s, self.info
        metrics_path = self.work_dir / METRICS_FILE
        if info.is_main:
            self.work_dir.mkdir(parents=True, exist_ok=True)
            ckpt.remove_stale_tmp(self.work_dir)
        dist.barrier()
        found = ckpt.find_resume_checkpoint(self.work_dir, s.resume_step)
        if found is not None:
            self._restore(found)
        else:
            # Different seeds per rank: dropout masks must not repeat across the ranks' slices.
            ckpt.seed_everything(s.seed + self.rank)
            if self.optimizer_state is not None:
                ckpt.load_optimizer_state(self.optimizer_state, self.optimizer)
        self.history = read_history(metrics_path, self.step)
        if found is not None and self.select is not None and s.patience is not None:
            self._stop_if_patience_spent()   # the run had stopped here: stop again
        if info.is_main:
            rewrite_jsonl(metrics_path, self.history)
            if found is None:
                ckpt.clear_best(self.work_dir)  # a fresh run owns no best weights yet
        dist.barrier()
        self.ddp = dist.wrap(self.model, info, s.find_unused_parameters)
        if info.is_main and self.on_log is not None:
            if found is not None:
                self.on_log({"split": "resume", "step": found.step, "path": str(found.path)})
            self.on_log({"split": "plan", "budget_s": self.budget,
                         "steps": None if self.budget else self.end_step - s.start_step})

    def _restore(self, found) -> None:
        s, t = self.s, found.trainer
        # Only the run directory's own (stages key it by artifact id): another run's weights
        # resumed here would be written out under this run's id.
        if t.get("run") != self.work_dir.name:
            raise BertctlError(f"{found.path}: cannot resume: written by another run "
                               f"({t.get('run')!r}), not {self.work_dir.name!r}; delete it")
        changed = [k for k, v in self.data_key.items() if t.get("data", {}).get(k) != v]
        if changed:
            raise BertctlError(
                f"{found.path}: cannot resume: {', '.join(changed)} differ from the run that "
                f"wrote it (" + ", ".join(f"{k} was {t.get('data', {}).get(k)!r}" for k in changed)
                + "); use the same settings and data, or another work directory")
        if not s.start_step <= found.step <= self.end_step:
            raise BertctlError(f"{found.path}: step {found.step} is outside this run's steps "
                               f"{s.start_step}..{self.end_step}; use another work directory")
        found.load_model(self.model)
        found.load_optimizer(self.optimizer)
        state = found.load_state()
        if self.scaler.is_enabled() and state["scaler"]:
            self.scaler.load_state_dict(state["scaler"])
        if self.average is not None:
            if "average" not in state:
                raise BertctlError(f"{found.path}: cannot resume with --ema: the checkpoint "
                                   f"has no weight average; use another work directory")
            self.average.load_state_dict(state["average"])
        if len(state["rng"]) == self.world:
            ckpt.set_rng_state(state["rng"][self.rank], self.device)
        else:  # another world size: exact dropout replay is impossible; stay deterministic
            ckpt.seed_everything(s.seed + 1_000_003 * found.step + self.rank)
        for policy in self.attention:               # the kernels the run took so far
            policy.adopt(t.get("attention") or {})
        self.compiler.adopt(t.get("compile"))
        self.step = self.resumed_from = found.step
        self.interval = Interval(**t["interval"])
        best = t.get("best")
        if best:
            self.best = Best(best["value"], best["step"], best["metrics"])
        self.last_eval = t.get("last_eval")
        self.elapsed = float(t.get("elapsed", 0.0))
        if self.info.is_main:
            if s.resume_from != "latest":
                ckpt.set_aside_later(self.work_dir, self.step)
            ckpt.restore_best(self.work_dir, found.path, self.best.step)

    # -- the run

    def run(self) -> TrainResult:
        s = self.s
        if s.stop_after is not None:  # stop there as if interrupted
            self.last_step = max(self.step, min(self.end_step, s.stop_after))
        pool = ThreadPoolExecutor(max_workers=1)  # loads the next step's batches during this one
        pending = pool.submit(self.load_step, self.step + 1) if self.step < self.last_step else None
        seen = [0, 0]  # tokens and examples since the last log record, for the throughput
        first_step = self.step
        clock = self.loop_started = time.perf_counter()   # start-up ends here
        self.started = self._now() - self.elapsed   # a resumed run continues the budget's clock
        try:
            while self.step < self.last_step:
                loaded = pending.result()
                pending = (pool.submit(self.load_step, self.step + 2)
                           if self.step + 1 < self.last_step else None)
                if loaded.micro != self.plan.micro_batch_size:   # loaded before a halving
                    loaded = self.load_step(self.step + 1)
                lr = (lr_at(self.step, s.lr, self.warmup, self.total_steps, s.schedule,
                            self.decay) if self.budget is None
                      else lr_at_share(self.elapsed / self.budget, s.lr, s.warmup, s.schedule,
                                       s.decay))
                set_lr(self.optimizer, lr)
                try:
                    self.train_step(loaded, lr)
                except torch.OutOfMemoryError:
                    pending = self._halve_micro_batch(pending, pool)
                    continue   # the step again, in micro-batches of half the rows
                if self.budget is not None and self.elapsed >= self.budget:
                    self.end_step = self.last_step = self.step   # the budget is spent
                self.compiler.after_step(self.step - first_step, self._steps_left())
                # Log, evaluate, checkpoint: in this order, so a checkpoint includes the
                # evaluation of its own step. Throughput excludes evaluation and checkpoints.
                # Each reads the device first: nothing is kept after a step that diverged.
                if self.step % s.log_every == 0 or self.step == self.end_step:
                    tokens, examples = self.read()
                    seen[0] += tokens
                    seen[1] += examples
                    self.log(lr, seen, max(time.perf_counter() - clock, 1e-9))
                    seen = [0, 0]
                    clock = time.perf_counter()
                evaluating, saving = self._evaluation_due(), self._checkpoint_due()
                if evaluating or saving:
                    tokens, examples = self.read()
                    seen[0] += tokens
                    seen[1] += examples
                    paused = time.perf_counter()
                    if evaluating:
                        self.evaluate()
                    if saving:
                        self.save()
                    clock += time.perf_counter() - paused
                signals.raise_pending()   # a SIGTERM that came during a checkpoint write
            self.read()   # (steps a stop left unlogged: their checks and the interval's sums)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        return self._result()

    def load_step(self, global_step: int) -> Loaded:
        """This rank's micro-batches of a global step (micro-batches rank, rank+W, ...) and what
        the step needs to know of them before it runs, counted here on the host (`Loaded`)."""
        epoch, indices = self.order.at(global_step - 1 - self.order_start)  # step 1: batch 0
        micro = self.plan.micro_batch_size
        loaded = Loaded()
        targets = 0
        for m in range(self.rank, self.plan.num_micro, self.world):
            b = self.data.batch(indices[m * micro:(m + 1) * micro], epoch)
            tokens = count_tokens(b, micro)
            positions = target_positions(b.get("labels"))
            targets += 0 if positions is None else len(positions)
            loaded.tokens += tokens
            b = without_full_mask(b)
            if self.device.type == "cuda":   # pinned: the copies to the GPU do not wait
                b = {k: v.pin_memory() if isinstance(v, torch.Tensor) else v
                     for k, v in b.items()}
                positions = None if positions is None else positions.pin_memory()
            loaded.batches.append(b)
            loaded.positions.append(positions)
        loaded.examples = len(loaded.batches) * micro
        loaded.micro = micro
        loaded.counts = torch.tensor([targets, loaded.tokens], dtype=torch.float64)
        if self.device.type == "cuda":
            loaded.counts = loaded.counts.pin_memory()
        return loaded

    def train_step(self, loaded: Loaded, lr: float) -> None:
        """Forward and backward over the micro-batches, one optimizer update, without reading
        anything back from the device: the step's loss, gradient norm and metrics wait on the
        device (`Unread`) for the next read (`read`). An update whose gradients are not
        finite is skipped on the device (AdamW's fused kernel, or fp16's loss scaler); the
        read stops the run there, before anything after it is kept."""
        s, device = self.s, self.device
        sync_scale = self.world / self.plan.num_micro  # DDP averages over ranks; we want the mean
        autocast = hardware.autocast(device, s.precision)
        # The step's predicted labels and real tokens over every rank, a mean per micro-batch
        # (step_scope.StepTargets): one collective, read by the losses on the device.
        counts = dist.all_reduce_sum(loaded.counts.to(device, non_blocking=True))
        per_micro = (counts.clamp(min=1) / self.plan.num_micro).float()   # (the losses stay fp32)
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        metrics: list[dict[str, tuple[Any, Any]]] = []
        self.updating = False
        replays = self.ddp is not self.model and getattr(self.model, "backward_replays", False)
        for i, (cpu_batch, positions) in enumerate(zip(loaded.batches, loaded.positions)):
            batch = hardware.to_device(cpu_batch, device)
            scope = StepTargets(
                batch, cpu_batch,
                positions=None if positions is None else positions.to(device, non_blocking=True),
                targets=per_micro[0], tokens=per_micro[1])
            # Gradients are all-reduced on the last micro-step only, or after the last by
            # `average_gradients` (a backward that replays the encoder fires DDP's hooks once
            # a replay).
            last = i == len(loaded.batches) - 1
            no_sync = (self.ddp.no_sync() if self.ddp is not self.model
                       and (replays or not last) else contextlib.nullcontext())
            with no_sync, step_targets(scope):
                with autocast:
                    out = self.ddp(**batch)
                loss = out["loss"]
                self.scaler.scale(loss.float() * sync_scale).backward()
            loss_sum += loss.detach().double() / self.plan.num_micro
            if self.step_metrics is not None:
                with torch.no_grad():
                    metrics.append(self.step_metrics(out, batch))
            del out   # (its graph is freed: a step that runs out of memory is taken again)

        self.updating = True   # (from here on, an out-of-memory error is not taken again)
        for m in metrics:
            self.unread.add_metrics(m, device)
        if replays:
            dist.average_gradients(self.model)
        self.scaler.unscale_(self.optimizer)
        norm = torch.nn.utils.clip_grad_norm_(
            self.model.parameters(), s.max_grad_norm if s.max_grad_norm is not None else math.inf)
        skip = self.s.precision != "fp16" and getattr(self.optimizer, "defaults", {}).get("fused")
        if skip:   # the fused kernel skips its update (and its step count) where this is 1
            self.optimizer.found_inf = (~torch.isfinite(norm)).float()
        self.scaler.step(self.optimizer)
        if skip:
            del self.optimizer.found_inf
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        if self.average is not None:
            self.average.update()
        self.step += 1
        self.unread.add_step(self.step, lr, loss_sum, norm.detach(), loaded.tokens,
                             loaded.examples)
        if self.budget is not None:   # the budget's clock decides every step (see read)
            self.elapsed = self._clock()

    def _halve_micro_batch(self, pending, pool):
        """After the device ran out of memory in a step: its gradients dropped, the plan's
        micro-batches halved (`plan.halved`: said, recorded, or one line), the step loaded
        again (returned: the loader's future for it)."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        micro = self.plan.micro_batch_size
        self.plan = halved(self.plan, self.step + 1, self.world, self.updating)
        if pending is not None:
            pending.cancel() or pending.result()
        self.halvings.append({"step": self.step + 1, "from": micro, "to": micro // 2})
        if self.info.is_main and self.on_log is not None:
            self.on_log({"split": "note", "text": f"out of memory at step {self.step + 1} with "
                         f"micro-batches of {micro} rows: micro-batches of {micro // 2} "
                         f"accumulate to the same batch from here on"})
        return pool.submit(self.load_step, self.step + 1)

    def _steps_left(self) -> float:
        """The steps this run expects still to take (a time budget: its time left over the
        mean step's so far)."""
        if self.budget is None:
            return self.end_step - self.step
        done = max(self.step - self.s.start_step, 1)
        return max(0.0, self.budget - self.elapsed) / max(self.elapsed / done, 1e-9)

    def _clock(self) -> float:
        """The run's time so far: the mean of the ranks' clocks, so that all decide alike
        when a time budget is spent and what rate the next step gets. Under torchrun with a
        time budget, a host read every step; otherwise each read of the device carries it."""
        now = self._now() - self.started
        if self.world == 1:
            return now
        clock = torch.tensor([now], dtype=torch.float64, device=self.device)
        return dist.all_reduce_sum(clock).item() / self.world

    def read(self) -> tuple[int, int]:
        """The one read of the device: the unread steps' losses, gradient norms, metrics and
        counts over every rank, added to the log interval; the run stops at the first step
        whose loss or gradient norm was not finite. Returns their tokens and examples over
        every rank (the throughput)."""
        unread, self.unread = self.unread, Unread()
        if not unread.steps:
            return 0, 0
        # (with a budget, the clock read each step: `_clock`)
        clock = self.elapsed if self.budget is not None else self._now() - self.started
        totals = unread.totals(self.device, self.world, clock)
        if self.budget is None:
            self.elapsed = totals.elapsed
        for step, lr, loss, grad_norm in totals.steps:
            self._stop_if_diverged(step, loss, grad_norm, lr)
        self.interval.add(totals)
        return totals.tokens, totals.examples

    def _now(self) -> float:
        """The clock of the time budget (read once at the start and once per step)."""
        return time.perf_counter()

    def _stop_if_diverged(self, step: int, loss: float, grad_norm: float, lr: float) -> None:
        if not (math.isfinite(loss) and (self.s.precision == "fp16" or math.isfinite(grad_norm))):
            raise TrainingDiverged.at(step, loss, grad_norm, lr,
                                      ckpt.list_checkpoints(self.work_dir))

    # -- logging, evaluation, checkpoints

    def epoch_of(self, global_step: int) -> float:
        return round((global_step - self.order_start) / self.order.steps_per_epoch, 4)

    def emit(self, record: dict[str, Any]) -> None:
        self.history.append(record)
        if self.info.is_main:
            append_jsonl(self.work_dir / METRICS_FILE, record)
            if self.on_log is not None:
                self.on_log(record)

    def log(self, lr: float, seen: list[int], elapsed: float) -> None:
        means = self.interval.record()
        self.emit({"split": "train", "step": self.step, "epoch": self.epoch_of(self.step),
                   "loss": means.pop("loss"), "lr": lr, **means,
                   "elapsed_s": round(self.elapsed, 1),
                   "tokens_per_s": round(seen[0] / elapsed, 1),
                   "examples_per_s": round(seen[1] / elapsed, 2)})
        self.interval = Interval()

    def _evaluation_due(self) -> bool:
        s = self.s
        if self.evaluate_fn is None:
            return False
        epoch_end = (self.step - self.order_start) % self.order.steps_per_epoch == 0
        return (self.step == self.end_step
                or (s.eval_every is not None and self.step % s.eval_every == 0)
                or (s.eval_every is None and epoch_end))

    def evaluate(self) -> None:
        """Evaluate, select the best weights (with `select`) and record the result."""
        averaged = self.average.applied() if self.average else contextlib.nullcontext()
        with averaged:   # (--ema: the average is what is evaluated and kept)
            self.model.eval()
            with torch.no_grad():
                metrics = {k: plain(v) for k, v in self.evaluate_fn(self.model).items()}
            self.model.train()
            record = {"split": "validation", "step": self.step,
                      "epoch": self.epoch_of(self.step), **metrics}
            self.last_eval = record
            if self.select is not None:
                key, mode = self.select
                if key not in metrics:
                    raise BertctlError(f"select: evaluate returned no {key!r} (it returned "
                                       f"{', '.join(metrics) or 'nothing'})")
                value = float(metrics[key])
                if self.best.improves(value, mode):
                    self.best = Best(value, self.step, record)
                    if self.info.is_main:
                        ckpt.write_best(self.work_dir, self.model, self.step)
        self.emit({**record, "elapsed_s": round(self.elapsed, 1)})   # the log only
        if self.select is not None and self.s.patience is not None:
            self._stop_if_patience_spent()

    def _stop_if_patience_spent(self) -> None:
        """End the run here when the last `patience` evaluations did not improve on the best
        (counted from the history, which a resumed run reads back: the same stop)."""
        if self.best.step is None:   # (a run resumed before its first evaluation)
            return
        since = sum(1 for r in self.history
                    if r.get("split") == "validation" and r["step"] > self.best.step)
        if since < self.s.patience or self.step >= self.end_step:
            return
        planned = self.end_step
        self.end_step = self.last_step = self.step
        self.stopped_by_patience = {"step": self.step, "planned": planned,
                                    "best_step": self.best.step}
        if self.on_log is not None and self.info.is_main:
            self.on_log({"split": "note", "text": (
                f"{self.select[0]} has not improved for {since} evaluations: stopped at step "
                f"{self.step} of {planned}; the best, step {self.best.step}, kept")})

    def _checkpoint_due(self) -> bool:
        s = self.s
        stopping = self.step == self.last_step < self.end_step
        return s.checkpoint_every is not None and (
            self.step % s.checkpoint_every == 0 or self.step == self.end_step or stopping)

    def save(self) -> None:
        rngs = dist.all_gather_object(ckpt.rng_state(self.device))  # a collective: every rank
        if not self.info.is_main:
            return
        s, best = self.s, self.best
        trainer = {
            "step": self.step, "epoch": self.epoch_of(self.step),
            "position": (self.step - self.order_start) % self.order.steps_per_epoch,
            "data": self.data_key, "world_size": self.world,
            "schedule": {"lr": s.lr, "warmup": self.warmup, "total_steps": self.total_steps},
            "interval": asdict(self.interval),
            "best": (None if best.step is None else
                     {"step": best.step, "value": best.value, "metrics": best.metrics,
                      "select": list(self.select) if self.select else None}),
            "last_eval": self.last_eval,
            "elapsed": self.elapsed,
            "run": self.work_dir.name,
            "attention": self.attention_choices(),
            "compile": self.compiler.record,
        }
        ckpt.save_checkpoint(self.work_dir, self.step, self.model, self.optimizer,
                             self.scaler.state_dict(), rngs, trainer, s.keep_last,
                             self.average.state_dict() if self.average else None)

    def _result(self) -> TrainResult:
        """The best evaluated weights (with `select`), or the final ones."""
        stopped_early = self.step < self.end_step
        dist.barrier()  # rank 0 has finished writing best/
        if self.select is not None and self.best.step is not None and not stopped_early:
            ckpt.load_weights(self.work_dir / ckpt.BEST / ckpt.WEIGHTS, self.model)
        elif self.average is not None and not stopped_early:
            self.average.copy_to()
        return TrainResult(step=self.step, epoch=self.epoch_of(self.step), history=self.history,
                           eval_metrics=self.last_eval, best_metrics=self.best.metrics,
                           best_step=self.best.step, model=self.model,
                           stopped_early=stopped_early, resumed_from=self.resumed_from,
                           elapsed=self.elapsed, loop_started=self.loop_started,
                           batch_fit=asdict(self.plan.budget) if self.plan.budget else None,
                           memory_fit={**asdict(self.plan.memory), **(
                               {"out_of_memory": self.halvings} if self.halvings else {})},
                           patience_stop=self.stopped_by_patience, optimizer=self.optimizer,
                           attention={"mode": self.s.attention,
                                      "chosen": self.attention_choices()},
                           compile=self.compiler.finish())

    def attention_choices(self) -> dict[str, str]:
        """The forms auto took, by shape bucket, over every encoder of the model."""
        chosen: dict[str, str] = {}
        for policy in self.attention:
            chosen.update(policy.choices())
        return dict(sorted(chosen.items()))

