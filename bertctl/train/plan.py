"""The batch of a training run, planned once before its first step.

A global batch (the flag, or fitted to a time budget: budget.py) is split into micro-batches
that fit the device's memory (memory.py), dealt round-robin to the ranks. The settings stay as
the user gave them; the plan is what the loop, its checkpoints and the run's record read.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn

from bertctl.errors import BertctlError

from bertctl.train import budget, memory
from bertctl.train.budget import BatchFit
from bertctl.train.memory import MemoryFit
from bertctl.train.order import DataSource


@dataclass(frozen=True)
class BatchPlan:
    batch_size: int            # examples an optimizer step sees, over every rank
    micro_batch_size: int      # examples one forward pass sees on one rank
    budget: BatchFit | None    # how a time budget chose batch_size (None: as asked)
    memory: MemoryFit          # how the device's memory chose micro_batch_size

    @property
    def num_micro(self) -> int:
        """Micro-batches a step takes, over every rank."""
        return self.batch_size // self.micro_batch_size


def plan_batch(model: nn.Module, data: DataSource, settings, device: torch.device, world: int,
               work_dir: Path, on_log=None) -> BatchPlan:
    """Measured as the run will run: `model` on its device, its attention and checkpointing
    set. Every rank plans alike (both fits agree across ranks)."""
    fitted = budget.fit_to_budget(model, data, settings, device, world, work_dir, on_log)
    batch_size = fitted.batch_size if fitted is not None else settings.batch_size
    fit = memory.fit_to_memory(model, data, settings, batch_size, device, world, on_log)
    return BatchPlan(batch_size, fit.micro_batch_size, fitted, fit)


def halved(plan: BatchPlan, step: int, world: int, updating: bool) -> BatchPlan:
    """The plan with micro-batches of half the rows, after the device ran out of memory at
    `step` (accumulation keeps the global batch, so the run computes what it would have). A
    BertctlError where nothing is left to halve, under torchrun (the ranks would have to
    agree on a new one), or past the step's backward (`updating`: the optimizer's state may
    be half-made)."""
    micro = plan.micro_batch_size
    where = f"out of memory at step {step} with micro-batches of {micro} rows"
    if micro == 1:
        raise BertctlError(f"{where}: give a shorter --max-seq-length, "
                           f"--gradient-checkpointing or a smaller model")
    if world > 1 or updating:
        raise BertctlError(f"{where}: give --micro-batch-size {micro // 2}" + (
            " (under torchrun the processes would have to agree on a new one)"
            if world > 1 else ""))
    return replace(plan, micro_batch_size=micro // 2,
                   memory=replace(plan.memory, micro_batch_size=micro // 2))
