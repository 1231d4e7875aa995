"""What the training loop tells the model about the micro-batch it is given, without a
parameter on every forward: a scope the loop opens around each forward (`step_targets`) and
the model's losses and heads consult (`scope_for`, `host_twin`). Outside the loop there is
none, and the model computes alone what the loop would have told it."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class StepTargets:
    """What the training loop knows of a micro-batch before its forward: `batch`, the tensors
    the model is given, and `host`, the same as the loader made them on the host; `positions`,
    the flat indices of its labels other than IGNORE_INDEX; `targets` and `tokens`, the step's
    predicted labels and real tokens over every micro-batch and rank, divided by the step's
    micro-batches (device tensors, never read back).

    A loss that is a mean over tokens (`token_mean`) divides its sum by these: the loop's mean
    over micro-batches then equals one process's mean over the global batch, whatever the
    micro-batches and ranks (each rank's mean of means weighs a token by its micro-batch's
    count). And what a step would otherwise ask the device (where the labels are, how long the
    rows are: `nonzero` and reads wait for the device to finish the encoder) is read from the
    host's copy instead (`host_twin`)."""
    batch: dict[str, Any]
    host: dict[str, Any]
    positions: torch.Tensor | None = None
    targets: torch.Tensor | None = None
    tokens: torch.Tensor | None = None


_STEP: contextvars.ContextVar[StepTargets | None] = contextvars.ContextVar("step_targets",
                                                                          default=None)


@contextlib.contextmanager
def step_targets(targets: StepTargets) -> Iterator[None]:
    """The loop's micro-batch scope (see `StepTargets`)."""
    token = _STEP.set(targets)
    try:
        yield
    finally:
        _STEP.reset(token)


def scope_for(labels: torch.Tensor | None) -> StepTargets | None:
    """The loop's scope, where `labels` are the micro-batch's own: a head computing a loss over
    other labels (derived ones) divides by its own count."""
    scope = _STEP.get()
    return (scope if scope is not None and labels is not None
            and scope.batch.get("labels") is labels else None)


def host_twin(tensor: torch.Tensor | None) -> torch.Tensor | None:
    """The host's copy of one of the loop's micro-batch tensors (the very tensor the model was
    given), or None (outside the loop, or a tensor made from it)."""
    scope = _STEP.get()
    if scope is None or tensor is None:
        return None
    for key, value in scope.batch.items():
        if value is tensor:
            return scope.host.get(key)
    return None


__all__ = ["StepTargets", "host_twin", "scope_for", "step_targets"]
