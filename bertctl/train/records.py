"""What a training run records: metrics.jsonl (a JSON record per log interval and per
evaluation), the sums of the current log interval, and the selection of the best evaluation."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertctl.errors import BertctlError
from bertctl.labels import IGNORE_INDEX
from bertctl.train import distributed as dist

METRICS_FILE = "metrics.jsonl"


class TrainingDiverged(BertctlError):
    """The loss or the gradient became NaN/inf; the run stops at the next read of the device,
    before it keeps anything (a log record, an evaluation, a checkpoint) after that step."""

    exit_code = 1

    @classmethod
    def at(cls, step: int, loss: float, grad_norm: float, lr: float,
           checkpoints: list) -> "TrainingDiverged":
        what, value = ("loss", loss) if not math.isfinite(loss) else ("gradient norm", grad_norm)
        keep = (f"the last good checkpoint is {checkpoints[-1][1]}" if checkpoints
                else "no checkpoint was written")
        return cls(f"training diverged at step {step}: {what} is {value} (lr {lr:.3g}); "
                   f"nothing after it was kept and {keep}. Try a lower lr, more warmup or "
                   f"max_grad_norm, or bf16/fp32 instead of fp16")


def target_positions(labels: Any) -> torch.Tensor | None:
    """The flat indices of a batch's token labels other than IGNORE_INDEX (integer labels of
    two or more dimensions: a masked LM's, a tagger's), found on the host; None for others."""
    if (not isinstance(labels, torch.Tensor) or labels.dim() < 2
            or labels.dtype.is_floating_point):
        return None
    return (labels.reshape(-1) != IGNORE_INDEX).nonzero().squeeze(1)


@dataclass
class Loaded:
    """A step's micro-batches on this rank, as the loader thread made them on the host, with
    what the step needs to know of them before it runs: each one's label positions
    (`target_positions`), this rank's [predicted labels, real tokens] (`counts`, a tensor
    for the step's one collective), its tokens and examples."""

    batches: list[dict[str, Any]] = field(default_factory=list)
    positions: list[torch.Tensor | None] = field(default_factory=list)
    counts: torch.Tensor | None = None
    tokens: int = 0
    examples: int = 0
    micro: int = 0   # the micro-batch size they were made with


@dataclass
class Totals:
    """The steps since the last read, over every rank: each step's (step, lr, mean loss,
    global gradient norm), their tokens and examples, each step metric's (numerator,
    denominator) sums, and the run's time (the mean of the ranks' clocks)."""

    steps: list[tuple[int, float, float, float]]
    tokens: int
    examples: int
    elapsed: float
    metrics: dict[str, tuple[float, float]]


class Unread:
    """What the steps since the last read left on the device (losses, norms, metric sums) and
    on the host (this rank's counts and numeric metric parts): nothing is read back until
    `totals`, so a GPU step never waits for the host."""

    def __init__(self):
        self.steps: list[tuple[int, float]] = []
        self.losses: list[torch.Tensor] = []
        self.norms: list[torch.Tensor] = []
        self.tokens = self.examples = 0
        self.device_metrics: dict[str, list[torch.Tensor]] = {}
        self.host_metrics: dict[str, list[float]] = {}

    def add_step(self, step: int, lr: float, loss: torch.Tensor, norm: torch.Tensor,
                 tokens: int, examples: int) -> None:
        self.steps.append((step, lr))
        self.losses.append(loss)
        self.norms.append(norm)
        self.tokens += tokens
        self.examples += examples

    def add_metrics(self, metrics: dict[str, tuple[Any, Any]], device) -> None:
        """A micro-batch's step metrics: tensor parts summed on the device, numbers on the
        host (a number made into a device tensor is a copy the host waits for)."""
        for name, pair in metrics.items():
            acc = self.device_metrics.setdefault(
                name, [torch.zeros((), dtype=torch.float64, device=device)] * 2)
            for j, x in enumerate(pair):
                if isinstance(x, torch.Tensor):
                    acc[j] = acc[j] + x.double()
                else:
                    self.host_metrics.setdefault(name, [0.0, 0.0])[j] += float(x)

    def totals(self, device, world: int, clock: float) -> Totals:
        """One collective and one read: the losses, metrics and counts summed over ranks (each
        rank's loss is its share of the step's mean), the norms as they are (clipping made
        them global already); `clock` this rank's time, averaged over ranks."""
        names = sorted(self.device_metrics)
        host = [float(self.tokens), float(self.examples), clock]
        host += [v for n in names for v in self.host_metrics.get(n, [0.0, 0.0])]
        parts = [torch.stack(self.losses)]
        parts += [torch.stack(self.device_metrics[n]) for n in names]
        parts.append(torch.tensor(host, dtype=torch.float64).to(device))
        reduced = dist.all_reduce_sum(torch.cat(parts))
        values = torch.cat([reduced, torch.stack(self.norms).double().to(reduced.device)]
                           ).tolist()
        k, m = len(self.steps), 2 * len(names)
        losses, on_device = values[:k], values[k:k + m]
        tokens, examples, clock = values[k + m:k + m + 3]
        on_host = values[k + m + 3:k + 2 * m + 3]
        norms = values[k + 2 * m + 3:]
        metrics = {n: (on_device[2 * j] + on_host[2 * j],
                       on_device[2 * j + 1] + on_host[2 * j + 1]) for j, n in enumerate(names)}
        return Totals(steps=[(step, lr, loss, norm) for (step, lr), loss, norm
                             in zip(self.steps, losses, norms)],
                      tokens=int(tokens), examples=int(examples), elapsed=clock / world,
                      metrics=metrics)


@dataclass
class Interval:
    """Sums over the steps since the last log record. Part of the checkpoint, so the first
    record after a resume averages the same steps as in an uninterrupted run."""

    steps: int = 0
    loss: float = 0.0
    grad_norm: float = 0.0
    finite_norms: int = 0  # fp16 steps the loss scaler skipped (inf gradients) do not count
    tokens: int = 0        # non-pad tokens trained on (all ranks): the model card's total
    metrics: dict[str, list[float]] = field(default_factory=dict)  # name -> [numerator, denom]

    def add(self, totals: Totals) -> None:
        for _, _, loss, grad_norm in totals.steps:
            self.steps += 1
            self.loss += loss
            if math.isfinite(grad_norm):
                self.grad_norm += grad_norm
                self.finite_norms += 1
        for name, (num, den) in totals.metrics.items():
            acc = self.metrics.setdefault(name, [0.0, 0.0])
            acc[0] += num
            acc[1] += den
        self.tokens += totals.tokens

    def record(self) -> dict[str, Any]:
        """The interval's means: loss, grad_norm and each step metric's ratio. Steps whose
        every metric counted nothing (a masked LM without one masked position) had nothing
        to score: their loss is NaN, not the 0 an empty sum gives."""
        empty = bool(self.metrics) and not any(b for _, b in self.metrics.values())
        return {"loss": float("nan") if empty else self.loss / self.steps,
                "grad_norm": (self.grad_norm / self.finite_norms if self.finite_norms
                              else float("nan")),
                **{n: (a / b if b else float("nan")) for n, (a, b) in sorted(self.metrics.items())},
                "tokens": self.tokens}


@dataclass
class Best:
    """The evaluation that selected the weights kept in work_dir/best/ (with `select`)."""

    value: float | None = None
    step: int | None = None
    metrics: dict[str, Any] | None = None

    def improves(self, value: float, mode: str) -> bool:
        if not isinstance(value, (int, float)) or math.isnan(value):
            return False
        return self.value is None or (value > self.value if mode == "max" else value < self.value)


def count_tokens(batch: dict[str, Any], n: int) -> int:
    """Non-pad tokens: the attention mask's non-zeros (a packed batch numbers its sequences),
    or every position if there is no mask."""
    mask = batch.get("attention_mask")
    if isinstance(mask, torch.Tensor):
        return int(torch.count_nonzero(mask))
    ids = batch.get("input_ids")
    return int(ids.numel()) if isinstance(ids, torch.Tensor) else n


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def read_history(path: Path, up_to_step: int) -> list[dict[str, Any]]:
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


def rewrite_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    os.replace(tmp, path)


def plain(value: Any) -> Any:
    """numpy and 0-d torch scalars as Python numbers, so records serialise as JSON."""
    if isinstance(value, (torch.Tensor, np.generic)) and np.ndim(value) == 0:
        return value.item()
    return value


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
    elapsed: float = 0.0                 # seconds of training, over all (resumed) runs
    batch_fit: dict[str, Any] | None = None   # the batch size fitted to the budget (budget.py)
    memory_fit: dict[str, Any] | None = None  # the micro-batch fitted to memory (memory.py)
    loop_started: float = 0.0            # time.perf_counter() when the first step began
    attention: dict[str, Any] | None = None   # the attention kernels taken (model/attention.py)
    compile: dict[str, Any] | None = None     # --compile's choice and figures (compiling.py)
    patience_stop: dict[str, int] | None = None   # where --patience ended the run
    optimizer: Any = None                # its state, for a phase the next one continues

    def fits(self) -> dict[str, Any]:
        """For a manifest's stats: what the loop fitted to the machine (a micro-batch only
        where memory changed it: the figures differ from run to run, the choice is what
        counts), and the attention kernels it took."""
        memory = self.memory_fit
        changed = memory is not None and memory["micro_batch_size"] != memory["asked"]
        return {**({"batch_fit": self.batch_fit} if self.batch_fit is not None else {}),
                **({"patience_stop": self.patience_stop} if self.patience_stop else {}),
                **({"memory_fit": memory} if changed else {}),
                **({"attention": self.attention} if self.attention is not None else {}),
                **({"compile": self.compile} if self.compile is not None else {})}
