"""Optimizers as plug-ins, declared as architectures, objectives and task families are: a name,
a line of help, and the function that builds it over the loop's parameter groups (decayed
weights; biases and norms without decay: optim.param_groups). `--optimizer`'s choices and help
are the registry's; the loop calls `make(groups, lr=, betas=, eps=)`.

Declaring one imports no torch (`--help` lists them): the function may be given as
"module:function", imported when a run builds it."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from bertctl.registry import Registry
from bertctl.settings import TRAINING, meta


@dataclass(frozen=True)
class Optimizer:
    name: str
    description: str
    # (param_groups, lr=, betas=, eps=) -> torch.optim.Optimizer, or "module:function"
    make: Callable[..., Any] | str

    def build(self, groups: list[dict], lr: float, betas: tuple[float, float], eps: float):
        make = self.make
        if isinstance(make, str):
            module, _, name = make.partition(":")
            make = getattr(importlib.import_module(module), name)
        return make(groups, lr=lr, betas=betas, eps=eps)


OPTIMIZERS: Registry[Optimizer] = Registry("optimizer")
register = OPTIMIZERS.register

register(Optimizer("adamw", "AdamW, BERT's (decoupled weight decay; fused kernel)",
                   "bertctl.train.optim:adamw"))
register(Optimizer("lamb", "LAMB (layer-wise trust ratios, for very large batches as in "
                   "NVIDIA's BERT recipe; see bertctl/train/optim.py)",
                   "bertctl.train.optim:lamb"))


def optimizer_field() -> dict[str, tuple[Any, Any]]:
    """`--optimizer` with the registered optimizers as its choices and help."""
    return {"optimizer": (Literal[tuple(OPTIMIZERS)], Field(
        "adamw", description="The optimizer, from the registry (bertctl/train/optimizers.py): "
        + "; ".join(f"{o.name}, {o.description}" for o in OPTIMIZERS.values()) + ".",
        json_schema_extra=meta(TRAINING)))}
