"""How a reranker is trained: a loss around the sequence classifier, chosen by the job.

The classifier scores each of a row's G candidates (logits (B, G), the positive first, as
the batch's `labels` say). Listwise: softmax cross-entropy over the row's candidates, the
positive the target. Pointwise: binary cross-entropy on each candidate's logit, 1 for the
positive and 0 for the negatives, averaged over every pair (sentence-transformers'
BinaryCrossEntropyLoss).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

LOSSES = ("listwise", "pointwise")


def ranking_loss(logits: torch.Tensor, positive: torch.Tensor, kind: str) -> torch.Tensor:
    """The loss of (B, G) logits whose row i's relevant candidate is `positive[i]`."""
    logits = logits.float()
    if kind == "listwise":
        return F.cross_entropy(logits, positive.reshape(-1))
    if kind == "pointwise":
        target = torch.zeros_like(logits)
        target.scatter_(1, positive.reshape(-1, 1), 1.0)
        return F.binary_cross_entropy_with_logits(logits, target)
    raise ValueError(f"ranking loss must be one of {LOSSES}, got {kind!r}")


class RankingLoss(nn.Module):
    """The model trained on a ranking loss; without labels, the model's own outputs. The loop
    saves the model inside it (`model.`); the stage writes `model`."""

    packs = False   # a row is a group of candidates, never packed

    def __init__(self, model: nn.Module, kind: str):
        super().__init__()
        if kind not in LOSSES:
            raise ValueError(f"ranking loss must be one of {LOSSES}, got {kind!r}")
        self.model, self.kind = model, kind

    def forward(self, labels: torch.Tensor | None = None, **inputs) -> dict[str, torch.Tensor]:
        out = dict(self.model(**inputs))
        if labels is not None:
            out["loss"] = ranking_loss(out["logits"], labels, self.kind)
        return out
