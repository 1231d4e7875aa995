"""The retrieval family's training losses as plug-ins, declared as optimizers are: a name, a
line of help, what the batch's labels must be, and the function (or "module:function", so
that declaring one imports no torch: `--help` reads this module). `--loss` takes any
registered name; the job wraps the model in contrastive.ContrastiveLoss with it. The built-in
ones, their definitions and the sentence-transformers losses they equal: contrastive.py.
Another loss is one `LOSSES.register(Loss(...))` from any module (tests/tasks/test_retrieval.py
registers one and trains with it)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from bertctl.registry import Registry

_HERE = "bertctl.tasks.retrieval.contrastive:"


@dataclass(frozen=True)
class Loss:
    name: str
    description: str
    # (vectors (B, K, D), labels or None, scale) -> the loss; or "module:function"
    fn: Callable[..., Any] | str
    # What the batch's labels are: "none" (in-batch negatives), "scores" (B,): a graded score
    # a pair, "teacher" (B, K): a teacher's score of each candidate.
    labels: Literal["none", "scores", "teacher"] = "none"
    # The teacher's scores read as probabilities (a sigmoid's: CrossEncoder.predict's default),
    # whose logits the loss recovers; scores outside [0, 1] (a logit-scoring teacher's) are
    # refused, not clamped into ties.
    probabilities: bool = False

    def compute(self, vectors, labels, scale: float):
        fn = self.fn
        if isinstance(fn, str):
            module, _, name = fn.partition(":")
            fn = getattr(importlib.import_module(module), name)
        return fn(vectors, labels, scale)


LOSSES: Registry[Loss] = Registry("contrastive loss")
register = LOSSES.register

register(Loss("infonce", "in-batch negatives (MultipleNegativesRankingLoss)",
              _HERE + "infonce_loss"))
register(Loss("symmetric", "in-batch negatives, both directions", _HERE + "symmetric_loss"))
register(Loss("cosent", "graded scores (CoSENTLoss)", _HERE + "cosent_loss", "scores"))
register(Loss("margin_mse", "a teacher's margins between the positive and each negative "
              "(MarginMSELoss; the score_* columns bertctl mine --teacher writes)",
              _HERE + "margin_mse_loss", "teacher"))

register(Loss("kl", "a teacher's distribution over each row's candidates, by KL divergence "
              "(DistillKLDivLoss; the score_* columns bertctl mine --teacher writes)",
              _HERE + "kl_loss", "teacher", probabilities=True))
register(Loss("kl_infonce", "a teacher's distribution plus in-batch negatives, summed",
              _HERE + "kl_infonce_loss", "teacher", probabilities=True))
register(Loss("margin_mse_infonce", "a teacher's margins plus in-batch negatives, summed "
              "(the student keeps its contrast while it imitates)",
              _HERE + "margin_mse_infonce_loss", "teacher"))


def default_loss(scored: bool, taught: bool) -> str:
    """The loss of a training file left to choose: its labels say which."""
    return "cosent" if scored else "kl" if taught else "infonce"


__all__ = ["LOSSES", "Loss", "default_loss", "register"]
