"""The one training loop, shared by pretraining and fine-tuning.

    result = train(model, data, TrainSettings(steps=1000, batch_size=256, lr=1e-4), work_dir)

Both stages hand in a model whose forward returns {"loss": ...} when given labels, and a data
source (see `DataSource`); they differ only in head, data and metrics. The loop owns everything
else: AdamW with BERT's schedule, gradient accumulation, mixed precision, data parallelism under
torchrun, logging to metrics.jsonl, evaluation and best-weight selection, and checkpoints that
resume bit-exactly.

Determinism is by construction rather than by replay: the examples of global step t are a
function of (seed, epoch, position) only, the learning rate a function of t only, and a
checkpoint holds the model, the optimizer and every RNG. So a resumed run computes the same
numbers an uninterrupted one would, and under DDP every rank knows every global batch without
communication.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

import numpy as np
import torch
from pydantic import Field, field_validator
from torch import nn

from bertctl.data.collate import length_grouped_batches, without_full_mask
from bertctl import hardware
from bertctl.errors import BertctlError
from bertctl.train import checkpoint as ckpt
from bertctl.train import distributed as dist
from bertctl.train import tensorboard
from bertctl.train.settings import TrainSettings
from bertctl.train.optim import lr_at, make_optimizer, set_lr, warmup_steps

METRICS_FILE = "metrics.jsonl"


@runtime_checkable
class DataSource(Protocol):
    """What `train` reads examples from.

    `batch(indices, epoch)` returns the model's keyword arguments (labels included) as tensors
    for those examples. It must be a pure function of its arguments (no global RNG: it may run
    in a background thread, and resuming relies on it); `epoch` lets dynamic masking draw new
    masks each epoch. An optional `lengths` (array, or method returning one) of token counts
    enables `group_by_length`. `PretrainingDataset` and the fine-tuning task data both fit.
    """

    def __len__(self) -> int: ...

    def batch(self, indices: np.ndarray, epoch: int) -> dict[str, torch.Tensor]: ...


class TrainingDiverged(BertctlError):
    """The loss or the gradient became NaN/inf; the run stops before updating the weights."""

    exit_code = 1


@dataclass
class TrainResult:
    step: int                            # the last global step trained
    epoch: float                         # epochs done (fractional)
    history: list[dict[str, Any]]        # every record of metrics.jsonl, in order
    eval_metrics: dict[str, Any] | None  # the last evaluation
    best_metrics: dict[str, Any] | None  # the evaluation that selected the returned weights
    best_step: int | None
    model: nn.Module                     # unwrapped; holds the best (select) or final weights
    stopped_early: bool = False          # stop_after reached before the end
    resumed_from: int | None = None      # the checkpoint step this run started from


# ---------------------------------------------------------------------------------------------
# Data order


class BatchOrder:
    """The global batches of each epoch, a function of (seed, epoch) only.

    The last incomplete batch of an epoch is dropped (as BERT's own input pipeline does): every
    step has the same number of examples, so micro-batches divide evenly over the ranks; with a
    new shuffle each epoch, different examples are left out each time.
    """

    def __init__(self, n: int, batch_size: int, seed: int, lengths: np.ndarray | None):
        if n < batch_size:
            raise BertctlError(f"train settings: batch_size {batch_size} is larger than the "
                               f"training data ({n} examples)")
        self.n, self.batch_size, self.seed, self.lengths = n, batch_size, seed, lengths
        self.steps_per_epoch = n // batch_size
        self._cached: tuple[int, list[np.ndarray]] | None = None

    def epoch(self, epoch: int) -> list[np.ndarray]:
        if self._cached is None or self._cached[0] != epoch:
            # SeedSequence mixes (seed, epoch) into independent streams for every epoch.
            if self.lengths is None:
                order = np.random.default_rng([self.seed, epoch]).permutation(self.n)
                batches = [order[i * self.batch_size:(i + 1) * self.batch_size]
                           for i in range(self.steps_per_epoch)]
            else:
                seed = int(np.random.SeedSequence([self.seed, epoch]).generate_state(1)[0])
                batches = [b for b in length_grouped_batches(self.lengths, self.batch_size, seed)
                           if len(b) == self.batch_size]
            self._cached = (epoch, batches)
        return self._cached[1]

    def at(self, local_step: int) -> tuple[int, np.ndarray]:
        """(epoch, example indices) of the run's `local_step`-th batch (0-based)."""
        epoch, position = divmod(local_step, self.steps_per_epoch)
        return epoch, self.epoch(epoch)[position]


def _lengths(data: Any) -> np.ndarray:
    lengths = getattr(data, "lengths", None)
    if lengths is None:
        raise BertctlError("train settings: group_by_length needs a data source with lengths")
    return np.asarray(lengths() if callable(lengths) else lengths)


# ---------------------------------------------------------------------------------------------
# Helpers


def _check_precision(precision: str, device: torch.device) -> None:
    if precision == "fp16" and device.type != "cuda":
        raise BertctlError("train settings: precision fp16 needs a CUDA GPU (loss scaling); "
                           "on CPU use bf16")
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise BertctlError("train settings: this GPU does not support bf16; use fp16")


def _count_tokens(batch: dict[str, Any], n: int) -> int:
    """Non-pad tokens: the attention mask's non-zeros (a packed batch numbers its sequences),
    or every position if there is no mask."""
    mask = batch.get("attention_mask")
    if isinstance(mask, torch.Tensor):
        return int(torch.count_nonzero(mask))
    ids = batch.get("input_ids")
    return int(ids.numel()) if isinstance(ids, torch.Tensor) else n


def _append_jsonl(path: Path, record: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def _read_history(path: Path, up_to_step: int) -> list[dict[str, Any]]:
    """metrics.jsonl records up to a checkpoint's step; later ones belong to a run that died."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line cut short by a crash
            continue
        if isinstance(record, dict) and record.get("step", 0) <= up_to_step:
            records.append(record)
    return records


def _rewrite_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    os.replace(tmp, path)


def _plain(value: Any) -> Any:
    """numpy and 0-d torch scalars as Python numbers, so records serialise as JSON."""
    if isinstance(value, (torch.Tensor, np.generic)) and np.ndim(value) == 0:
        return value.item()
    return value


def _better(value: float, best: float | None, mode: str) -> bool:
    if not isinstance(value, (int, float)) or math.isnan(value):
        return False
    return best is None or (value > best if mode == "max" else value < best)


@dataclass
class _Interval:
    """Sums over the steps since the last log record. Part of the checkpoint, so the first
    record after a resume averages the same steps as in an uninterrupted run."""

    steps: int = 0
    loss: float = 0.0
    grad_norm: float = 0.0
    finite_norms: int = 0  # fp16 steps the loss scaler skipped (inf gradients) do not count
    tokens: int = 0        # non-pad tokens trained on (all ranks): the model card's total
    metrics: dict[str, list[float]] = field(default_factory=dict)  # name -> [numerator, denom]


# ---------------------------------------------------------------------------------------------
# The loop


def train(model: nn.Module, train_data: DataSource, settings: TrainSettings, work_dir: str | Path,
          evaluate: Callable[[nn.Module], dict[str, Any]] | None = None,
          select: tuple[str, str] | None = None,
          on_log: Callable[[dict[str, Any]], None] | None = None,
          step_metrics: Callable[[dict[str, Any], dict[str, Any]],
                                 dict[str, tuple[Any, Any]]] | None = None) -> TrainResult:
    """Train `model` on `train_data`; resumes from `work_dir`'s newest checkpoint if there is one.

    work_dir (shared by all ranks; rank 0 writes) receives metrics.jsonl (one JSON record per
    line: "split" "train" every log_every steps with the interval's mean loss and grad_norm, the
    lr, tokens_per_s, examples_per_s and the step metrics; "split" "validation" per evaluation),
    checkpoints/step-XXXXXXXX/ (see checkpoint.py) and, with `select`, best/model.safetensors.

    evaluate(model) -> metrics: called on every rank (it may shard the data and reduce with
        `distributed.all_reduce_sum`, or evaluate everything; all ranks must return the same
        numbers), with the unwrapped model in eval mode, under no_grad and the run's autocast.
    select: (metric key, "max" | "min") keeps the best evaluated weights in work_dir/best/ and
        returns the model holding them; without it the model holds the final weights.
    on_log(record): rank 0 only, for every record written to metrics.jsonl (train and
        validation), e.g. for a progress display; and, when the run resumes, once with
        {"split": "resume", "step": N, "path": checkpoint} (not written to metrics.jsonl).
    step_metrics(outputs, batch) -> {name: (numerator, denominator)}: called after each
        micro-batch's forward (no_grad); numerators and denominators are summed over
        micro-batches, steps of the log interval and ranks, and `name` is logged as their
        ratio (e.g. MLM accuracy = (correct, predicted)). Tensors are fine (no sync needed).
    """
    s = settings
    if select is not None and (evaluate is None or select[1] not in ("max", "min")):
        raise BertctlError("train: select needs an evaluate function and a mode 'max' or 'min'")
    work_dir = Path(work_dir)
    if s.tensorboard:
        tensorboard.require()
    info = dist.init(s.device)
    device, world, rank = info.device, info.world_size, info.rank
    _check_precision(s.precision, device)

    # -- batch geometry: a global batch is num_micro micro-batches, dealt round-robin to ranks
    micro = s.micro_batch_size or s.batch_size // world
    if micro < 1 or s.batch_size % (micro * world):
        raise BertctlError(f"train settings: batch_size {s.batch_size} is not a multiple of "
                           f"micro_batch_size {micro} x {world} process(es)")
    num_micro = s.batch_size // micro
    order = BatchOrder(len(train_data), s.batch_size, s.seed,
                       _lengths(train_data) if s.group_by_length else None)
    run_steps = s.steps if s.steps is not None else max(1, round(s.epochs * order.steps_per_epoch))
    end_step = s.start_step + run_steps
    total_steps = s.total_steps if s.total_steps is not None else end_step
    if total_steps < end_step:
        raise BertctlError(f"train settings: total_steps {total_steps} is before this run's "
                           f"last step {end_step} (start_step {s.start_step} + {run_steps})")
    warmup = warmup_steps(s.warmup, total_steps)

    # -- model, optimizer, loss scaling
    raw = model.to(device)
    raw.train()
    for module in raw.modules():   # the encoder's switch (model.bert.BertModel)
        if hasattr(module, "gradient_checkpointing"):
            module.gradient_checkpointing = s.gradient_checkpointing
            if s.compile:
                module.compile_layers()
    optimizer = make_optimizer(raw, s.lr, s.weight_decay, tuple(s.betas), s.eps, s.optimizer)
    scaler = torch.amp.GradScaler(device.type, enabled=s.precision == "fp16")

    # -- resume or start fresh
    metrics_path = work_dir / METRICS_FILE
    if info.is_main:
        work_dir.mkdir(parents=True, exist_ok=True)
        ckpt.remove_stale_tmp(work_dir)
    dist.barrier()
    found = ckpt.find_resume_checkpoint(work_dir, s.resume_step)
    data_key = {"num_examples": len(train_data), "batch_size": s.batch_size, "seed": s.seed,
                "group_by_length": s.group_by_length, "start_step": s.start_step}
    step = s.start_step
    interval = _Interval()
    best_value: float | None = None
    best_step: int | None = None
    best_metrics: dict[str, Any] | None = None
    last_eval: dict[str, Any] | None = None
    if found is not None:
        t = found.trainer
        changed = [k for k, v in data_key.items() if t.get("data", {}).get(k) != v]
        if changed:
            raise BertctlError(
                f"{found.path}: cannot resume: {', '.join(changed)} differ from the run that "
                f"wrote it (" + ", ".join(f"{k} was {t.get('data', {}).get(k)!r}" for k in changed)
                + "); use the same settings and data, or another work directory")
        if not s.start_step <= found.step <= end_step:
            raise BertctlError(f"{found.path}: step {found.step} is outside this run's steps "
                               f"{s.start_step}..{end_step}; use another work directory")
        found.load_model(raw)
        found.load_optimizer(optimizer)
        state = found.load_state()
        if scaler.is_enabled() and state["scaler"]:
            scaler.load_state_dict(state["scaler"])
        if len(state["rng"]) == world:
            ckpt.set_rng_state(state["rng"][rank], device)
        else:  # another world size: exact dropout replay is impossible; stay deterministic
            ckpt.seed_everything(s.seed + 1_000_003 * found.step + rank)
        step = found.step
        iv = t["interval"]
        interval = _Interval(**iv)
        best = t.get("best")
        if best:
            best_value, best_step, best_metrics = best["value"], best["step"], best["metrics"]
        last_eval = t.get("last_eval")
        if info.is_main:
            if s.resume_from != "latest":
                ckpt.set_aside_later(work_dir, step)
            ckpt.restore_best(work_dir, found.path, best_step)
    else:
        # Different seeds per rank: dropout masks must not repeat across the ranks' slices.
        ckpt.seed_everything(s.seed + rank)
    history = _read_history(metrics_path, step)
    if info.is_main:
        _rewrite_jsonl(metrics_path, history)
        if found is None:
            ckpt.clear_best(work_dir)  # a fresh run owns no best weights yet
    dist.barrier()

    board = (tensorboard.ScalarWriter(s.tensorboard, purge_step=step + 1 if found else None)
             if info.is_main and s.tensorboard else None)
    ddp = dist.wrap(raw, info, s.find_unused_parameters)
    sync_scale = world / num_micro  # DDP averages over ranks; we want the mean over micro-batches
    autocast = hardware.autocast(device, s.precision)
    pin = device.type == "cuda"

    def load_step(global_step: int) -> tuple[list[dict[str, Any]], int, int]:
        """This rank's micro-batches of a global step: micro-batches rank, rank+W, ..."""
        epoch, indices = order.at(global_step - 1 - s.start_step)  # step 1 is batch 0
        batches, tokens = [], 0
        for m in range(rank, num_micro, world):
            b = train_data.batch(indices[m * micro:(m + 1) * micro], epoch)
            tokens += _count_tokens(b, micro)
            b = without_full_mask(b)
            if pin:
                b = {k: v.pin_memory() if isinstance(v, torch.Tensor) else v for k, v in b.items()}
            batches.append(b)
        return batches, tokens, len(batches) * micro

    def emit(record: dict[str, Any]) -> None:
        history.append(record)
        if info.is_main:
            _append_jsonl(metrics_path, record)
            if on_log is not None:
                on_log(record)
            if board is not None:
                board.log(record)

    def epoch_of(global_step: int) -> float:
        return round((global_step - s.start_step) / order.steps_per_epoch, 4)

    def run_eval() -> None:
        nonlocal best_value, best_step, best_metrics, last_eval
        raw.eval()
        with torch.no_grad(), hardware.autocast(device, s.precision):
            metrics = {k: _plain(v) for k, v in evaluate(raw).items()}
        raw.train()
        record = {"split": "validation", "step": step, "epoch": epoch_of(step), **metrics}
        last_eval = record
        if select is not None:
            key, mode = select
            if key not in metrics:
                raise BertctlError(f"select: evaluate returned no {key!r} (it returned "
                                   f"{', '.join(metrics) or 'nothing'})")
            value = float(metrics[key])
            if _better(value, best_value, mode):
                best_value, best_step, best_metrics = value, step, record
                if info.is_main:
                    ckpt.write_best(work_dir, raw, step)
        emit(record)

    def save() -> None:
        rngs = dist.all_gather_object(ckpt.rng_state(device))  # a collective: every rank
        if not info.is_main:
            return
        trainer = {
            "step": step, "epoch": epoch_of(step),
            "position": (step - s.start_step) % order.steps_per_epoch,
            "data": data_key, "world_size": world,
            "schedule": {"lr": s.lr, "warmup": warmup, "total_steps": total_steps},
            "interval": asdict(interval),
            "best": (None if best_step is None else
                     {"step": best_step, "value": best_value, "metrics": best_metrics,
                      "select": list(select) if select else None}),
            "last_eval": last_eval,
        }
        ckpt.save_checkpoint(work_dir, step, raw, optimizer, scaler.state_dict(), rngs, trainer,
                             s.keep_last)

    # -- the loop
    resumed_from = found.step if found is not None else None
    if resumed_from is not None and info.is_main and on_log is not None:
        on_log({"split": "resume", "step": resumed_from, "path": str(found.path)})
    pool = ThreadPoolExecutor(max_workers=1)  # loads the next step's batches during this one
    last_step = end_step if s.stop_after is None else max(step, min(end_step, s.stop_after))
    pending = pool.submit(load_step, step + 1) if step < last_step else None
    seen_tokens = seen_examples = 0
    clock = time.perf_counter()
    try:
        while step < last_step:
            batches, tokens, examples = pending.result()
            pending = pool.submit(load_step, step + 2) if step + 1 < last_step else None
            lr = lr_at(step, s.lr, warmup, total_steps)
            set_lr(optimizer, lr)

            loss_sum = torch.zeros((), dtype=torch.float64, device=device)
            sums: dict[str, list[torch.Tensor]] = {}
            for i, cpu_batch in enumerate(batches):
                batch = hardware.to_device(cpu_batch, device)
                # Gradients are all-reduced on the last micro-step only.
                last = i == len(batches) - 1
                no_sync = ddp.no_sync() if ddp is not raw and not last else contextlib.nullcontext()
                with no_sync:
                    with autocast:
                        out = ddp(**batch)
                    loss = out["loss"]
                    scaler.scale(loss.float() * sync_scale).backward()
                loss_sum += loss.detach().double() / num_micro
                if step_metrics is not None:
                    with torch.no_grad():
                        for name, pair in step_metrics(out, batch).items():
                            num, den = (torch.as_tensor(x, dtype=torch.float64, device=device)
                                        for x in pair)
                            acc = sums.get(name)
                            sums[name] = [num, den] if acc is None else [acc[0] + num, acc[1] + den]

            scaler.unscale_(optimizer)
            norm = torch.nn.utils.clip_grad_norm_(
                raw.parameters(), s.max_grad_norm if s.max_grad_norm is not None else math.inf)
            # One collective and one host sync per step: the global loss and gradient norm
            # (needed every step to stop on NaN before the update), the step metrics and the
            # throughput counts. (The norm is already global: clipping reduced it.)
            names = sorted(sums)
            packed = torch.stack([loss_sum] + [x.double() for n in names for x in sums[n]]
                                 + [torch.tensor(float(tokens), dtype=torch.float64, device=device),
                                    torch.tensor(float(examples), dtype=torch.float64,
                                                 device=device)])
            reduced = dist.all_reduce_sum(packed)
            values = torch.cat([reduced, norm.detach().double().reshape(1).to(reduced.device)
                                ]).tolist()
            grad_norm = values.pop()
            loss_value = values[0]
            if not math.isfinite(loss_value) or (s.precision != "fp16"
                                                 and not math.isfinite(grad_norm)):
                what = "loss" if not math.isfinite(loss_value) else "gradient norm"
                value = loss_value if what == "loss" else grad_norm
                last_good = ckpt.list_checkpoints(work_dir)
                keep = (f"the last good checkpoint is {last_good[-1][1]}" if last_good
                        else "no checkpoint was written")
                raise TrainingDiverged(
                    f"training diverged at step {step + 1}: {what} is {value} (lr {lr:.3g}); "
                    f"the weights were not updated and {keep}. Try a lower lr, more warmup "
                    f"or max_grad_norm, or bf16/fp32 instead of fp16")
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            step += 1

            interval.steps += 1
            interval.loss += loss_value
            if math.isfinite(grad_norm):
                interval.grad_norm += grad_norm
                interval.finite_norms += 1
            for j, name in enumerate(names):
                acc = interval.metrics.setdefault(name, [0.0, 0.0])
                acc[0] += values[1 + 2 * j]
                acc[1] += values[2 + 2 * j]
            seen_tokens += int(values[-2])
            interval.tokens += int(values[-2])
            seen_examples += int(values[-1])

            # -- bookkeeping: log, evaluate, checkpoint (in this order, so a checkpoint
            #    includes the evaluation of its own step)
            if step % s.log_every == 0 or step == end_step:
                elapsed = max(time.perf_counter() - clock, 1e-9)
                record = {"split": "train", "step": step, "epoch": epoch_of(step),
                          "loss": interval.loss / interval.steps, "lr": lr,
                          "grad_norm": (interval.grad_norm / interval.finite_norms
                                        if interval.finite_norms else float("nan")),
                          **{n: (a / b if b else float("nan"))
                             for n, (a, b) in sorted(interval.metrics.items())},
                          "tokens": interval.tokens,
                          "tokens_per_s": round(seen_tokens / elapsed, 1),
                          "examples_per_s": round(seen_examples / elapsed, 2)}
                emit(record)
                interval = _Interval()
                seen_tokens = seen_examples = 0
                clock = time.perf_counter()
            paused = time.perf_counter()
            epoch_end = (step - s.start_step) % order.steps_per_epoch == 0
            if evaluate is not None and (
                    step == end_step
                    or (s.eval_every is not None and step % s.eval_every == 0)
                    or (s.eval_every is None and epoch_end)):
                run_eval()
            stopping = step == last_step < end_step
            if s.checkpoint_every is not None and (
                    step % s.checkpoint_every == 0 or step == end_step or stopping):
                save()
            clock += time.perf_counter() - paused  # throughput excludes eval and checkpoints
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        if board is not None:
            board.close()

    # -- the weights to return: the best evaluated ones, or the final ones
    stopped_early = step < end_step
    dist.barrier()  # rank 0 has finished writing best/
    if select is not None and best_step is not None and not stopped_early:
        ckpt.load_weights(work_dir / ckpt.BEST / ckpt.WEIGHTS, raw)
    return TrainResult(step=step, epoch=epoch_of(step), history=history, eval_metrics=last_eval,
                       best_metrics=best_metrics, best_step=best_step, model=raw,
                       stopped_early=stopped_early, resumed_from=resumed_from)


def accuracy(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(correct, total) for `step_metrics`: argmax over the last dimension."""
    return (logits.argmax(-1) == targets).sum(), torch.tensor(targets.numel(),
                                                              device=targets.device)


def pretraining_metrics(outputs: dict[str, Any], batch: dict[str, Any]) -> dict[str, tuple]:
    """`step_metrics` for BertForPreTraining: MLM accuracy over the masked positions and NSP
    accuracy (when the data has next-sentence labels)."""
    metrics = {}
    if "mlm_targets" in outputs:
        metrics["mlm_accuracy"] = accuracy(outputs["mlm_logits"], outputs["mlm_targets"])
    if batch.get("next_sentence_label") is not None:
        metrics["nsp_accuracy"] = accuracy(outputs["nsp_logits"],
                                           batch["next_sentence_label"].reshape(-1))
    return metrics


__all__ = ["BatchOrder", "DataSource", "TrainResult", "TrainSettings", "TrainingDiverged",
           "accuracy", "pretraining_metrics", "train"]
