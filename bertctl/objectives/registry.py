"""The pretraining objectives by name; each registers itself when its module is imported."""

from __future__ import annotations

from bertctl.model import architectures
from bertctl.objectives.base import OBJECTIVES, Objective

register = OBJECTIVES.register
get = OBJECTIVES.get_known


def for_checkpoint(hf_config: dict) -> Objective:
    """The objective that scores a checkpoint on pretraining data: the one whose model's role
    its config.json names; for any other checkpoint (a plain encoder) BERT's, which scores
    whatever masked-LM head it has, or the masked LM's where the architecture has no
    next-sentence head."""
    arch = architectures.of_config(hf_config)
    roles = architectures.roles_of(hf_config.get("architectures") or [])
    return next((o for o in OBJECTIVES.values() if o.head in roles),
                OBJECTIVES["bert" if "pretraining" in arch.heads else "mlm"])
