"""An exponential moving average of a model's trainable weights during training (`--ema`): after
each update the average moves toward the weights by (1 - decay), where decay is at most
(1 + t) / (10 + t) at update t (TensorFlow's ExponentialMovingAverage with num_updates), so the
first updates are not swamped by the initial weights. The average is held in fp32 on the
weights' device and updated there without a read back to the host; evaluation, the best
weights and the final weights are the average's (`applied`, `copy_to`); a checkpoint keeps it,
so a resumed run continues the same average."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn


class WeightAverage:
    def __init__(self, model: nn.Module, decay: float):
        if not 0 < decay < 1:
            raise ValueError(f"the average's decay must be in (0, 1), got {decay}")
        self.decay = decay
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.average = [p.detach().float().clone() for p in self.params]
        self.updates = 0

    def rate(self) -> float:
        """The weight of the newest weights in the update to come."""
        t = self.updates
        return 1.0 - min(self.decay, (1 + t) / (10 + t))

    @torch.no_grad()
    def update(self) -> None:
        torch._foreach_lerp_(self.average, [p.detach().float() for p in self.params],
                             self.rate())
        self.updates += 1

    @torch.no_grad()
    def copy_to(self) -> None:
        """The model's weights become the average (the run's last use of it)."""
        for p, a in zip(self.params, self.average, strict=True):
            p.copy_(a)

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """The average in the model's weights for the block (an evaluation, writing the best
        weights); the trained weights back after it."""
        with torch.no_grad():
            trained = [p.detach().clone() for p in self.params]
            self.copy_to()
        try:
            yield
        finally:
            with torch.no_grad():
                for p, t in zip(self.params, trained, strict=True):
                    p.copy_(t)

    def state_dict(self) -> dict:
        return {"decay": self.decay, "updates": self.updates,
                "average": [a.cpu() for a in self.average]}

    def load_state_dict(self, state: dict) -> None:
        if len(state["average"]) != len(self.average) or any(
                a.shape != b.shape for a, b in zip(state["average"], self.average)):
            raise ValueError("the checkpoint's weight average is of another model")
        self.updates = int(state["updates"])
        for a, saved in zip(self.average, state["average"], strict=True):
            a.copy_(saved)
