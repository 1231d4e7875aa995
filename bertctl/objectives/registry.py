"""The pretraining objectives by name; each registers itself when its module is imported."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bertctl.registry import Registry

if TYPE_CHECKING:
    from bertctl.objectives.base import Objective

OBJECTIVES: Registry["Objective"] = Registry("pretraining objective")
register = OBJECTIVES.register
get = OBJECTIVES.get_known


def for_checkpoint(architectures: list[str]) -> "Objective":
    """The objective that scores a checkpoint on pretraining data: the one whose model its
    config.json names; for any other checkpoint (a plain encoder, transformers' BertForMaskedLM)
    BERT's, which scores whatever masked-LM head it has."""
    return next((o for o in OBJECTIVES.values() if o.architecture in architectures),
                OBJECTIVES["bert"])
