"""Fitting a time-budget run to the machine it runs on.

A recipe's batch size is a choice about how many updates its budget buys: the same 20 minutes
are about 800 steps of 64 sequences where bf16 matmuls run natively and 300 where only fp32
does. With `min_steps` the loop measures the time one example takes here (forward and backward
passes of a few real examples, the run's own precision and threads) and halves the batch size
until the budget buys that many steps. The learning rate, the warm-up (a share of the budget)
and the model stay as given: what changes is only how the same examples are grouped into
updates. Whether that pays is for measurement (docs/benchmarks.md, "The recipe fits the
machine?": for the budget recipe on an AVX2 CPU at 20 minutes it did not, so the recipe does
not set it).

The choice is written to the work directory before the first step, so a resumed run takes the
batch size its checkpoints were written with, not a new measurement.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from bertctl import hardware
from bertctl.data.collate import without_full_mask
from bertctl.train import distributed as dist
from bertctl.train.order import DataSource

FIT_FILE = "batch-fit.json"
# Halving stops here: smaller updates than this were never measured to pay, and the optimizer
# update's fixed cost starts to count against the forward and backward passes.
SMALLEST_BATCH = 16
PROBE_ROWS = 16


@dataclass(frozen=True)
class BatchFit:
    batch_size: int              # chosen
    asked: int                   # the settings' batch size
    min_steps: int
    budget_s: float
    seconds_per_example: float   # measured: forward and backward, per process
    expected_steps: int          # what the budget buys at the chosen size, by the measurement

    def message(self) -> str:
        short = (f"; fewer than the {self.min_steps} asked even at {self.batch_size}: a smaller "
                 f"model or a longer budget buys more" if self.expected_steps < self.min_steps
                 else "")
        return (f"time budget: {1000 * self.seconds_per_example:.1f} ms per example measured; "
                f"batch size {self.batch_size} (asked {self.asked}) buys about "
                f"{self.expected_steps} steps in {self.budget_s:g}s{short}")


def largest_batch_in_budget(asked: int, step_unit: int, min_steps: int, budget_s: float,
           seconds_per_example: float, world: int) -> BatchFit:
    """The largest of asked, asked/2, asked/4, ... (a multiple of step_unit, at least
    SMALLEST_BATCH unless asked is smaller) whose steps fit min_steps times into the budget;
    the smallest of them if none does. Each process does batch/world examples a step."""

    def steps(batch: int) -> int:
        return int(budget_s / max(batch / world * seconds_per_example, 1e-12))

    batch = asked
    while (steps(batch) < min_steps and batch % 2 == 0 and batch // 2 >= SMALLEST_BATCH
           and (batch // 2) % step_unit == 0):
        batch //= 2
    return BatchFit(batch, asked, min_steps, budget_s, seconds_per_example, steps(batch))


def seconds_per_example(model: nn.Module, data: DataSource, rows: int, device: torch.device,
            precision: str, repeats: int = 2) -> float:
    """Seconds per example of a forward and backward pass over the first `rows` training
    examples, the best of `repeats` after one untimed pass. The weights are not updated and the
    gradients are dropped; the loop reseeds every RNG before its first step."""
    batch = hardware.to_device(without_full_mask(data.batch(list(range(rows)), 0)), device)
    autocast = hardware.autocast(device, precision)
    was_training = model.training
    model.train()
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        with autocast:
            loss = model(**batch)["loss"]
        loss.float().backward()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    return min(times[1:]) / rows


def fit_to_budget(model: nn.Module, data: DataSource, settings, device: torch.device,
                  world: int, work_dir: Path, on_log=None) -> BatchFit | None:
    """The batch size for a run with a time budget and min_steps (None for any other run),
    announced through on_log."""
    s = settings
    if s.time_budget is None or s.min_steps is None:
        return None
    chosen = fit(model, data, s.batch_size, (s.micro_batch_size or 1) * world, s.min_steps,
                 s.time_budget, s.precision, device, world, work_dir)
    if on_log is not None:
        on_log({"split": "note", "text": chosen.message()})
    return chosen


def fit(model: nn.Module, data: DataSource, asked: int, step_unit: int, min_steps: int,
        budget_s: float, precision: str, device: torch.device, world: int,
        work_dir: Path) -> BatchFit:
    """The work directory's earlier choice for the same request, else a new measurement
    (every process measures; they take the mean, so all choose alike)."""
    path = work_dir / FIT_FILE
    earlier = _read(path)
    if earlier is not None and (earlier.asked, earlier.min_steps, earlier.budget_s) == (
            asked, min_steps, budget_s):
        return earlier
    rows = max(1, min(PROBE_ROWS, len(data), asked // world))
    own = seconds_per_example(model, data, rows, device, precision)
    mean = float(dist.all_reduce_sum(torch.tensor([own], dtype=torch.float64,
                                                  device=device)).item()) / world
    chosen = largest_batch_in_budget(asked, step_unit, min_steps, budget_s, mean, world)
    if dist.is_main():
        work_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(asdict(chosen), indent=1) + "\n", encoding="utf-8")
        tmp.replace(path)
    dist.barrier()
    return chosen


def _read(path: Path) -> BatchFit | None:
    try:
        return BatchFit(**json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError):
        return None   # unreadable: measure again (checkpoints of another size are refused)
