"""The pretraining objectives by name; each registers itself when its module is imported."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bertctl.errors import BertctlError

if TYPE_CHECKING:
    from bertctl.objectives.base import Objective

OBJECTIVES: dict[str, "Objective"] = {}


def register(objective: "Objective") -> "Objective":
    if objective.name in OBJECTIVES:
        raise ValueError(f"pretraining objective {objective.name!r} is registered twice")
    OBJECTIVES[objective.name] = objective
    return objective


def get(name: str) -> "Objective":
    objective = OBJECTIVES.get(name)
    if objective is None:
        raise BertctlError(f"unknown pretraining objective {name!r} (known: "
                           f"{', '.join(OBJECTIVES)})")
    return objective


def for_checkpoint(architectures: list[str]) -> "Objective":
    """The objective that scores a checkpoint on pretraining data: the one whose model its
    config.json names; for any other checkpoint (a plain encoder, transformers' BertForMaskedLM)
    BERT's, which scores whatever masked-LM head it has."""
    return next((o for o in OBJECTIVES.values() if o.architecture in architectures),
                OBJECTIVES["bert"])
