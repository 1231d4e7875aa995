"""Class weights and label smoothing for the families whose loss is a cross-entropy over
classes (classification, tagging; multiple choice takes smoothing): the loss of the model's
logits, each class's term weighted and the targets smoothed as torch's `cross_entropy` defines
them, computed around the model (`ClassLoss`) where the settings ask for either.

`balanced` weights are scikit-learn's `compute_class_weight("balanced")`: the training units
(examples; a tagging file's words) over the classes times the class's count. A mean over a
micro-batch is torch's weighted mean, the sum of the weighted terms over the sum of the
targets' weights; tagging without weights keeps the role's mean over the step's tokens.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bertctl.errors import BertctlError, read_json_object
from bertctl.labels import IGNORE_INDEX
from bertctl.model.shared import token_mean
from bertctl.step_scope import scope_for

BALANCED = "balanced"


def balanced(classes: np.ndarray, num_classes: int, label_list) -> np.ndarray:
    """scikit-learn's balanced weights of integer `classes`: n / (num_classes * count)."""
    counts = np.bincount(np.asarray(classes, dtype=np.int64), minlength=num_classes)
    empty = [str(label_list[i]) for i in np.flatnonzero(counts == 0)]
    if empty:
        raise BertctlError(f"--class-weights balanced: no training example of "
                           f"{', '.join(empty)}; name the weights instead")
    return len(classes) / (num_classes * counts.astype(np.float64))


def weights_file(value: str | None) -> Path | None:
    """The JSON file --class-weights names, if it names one."""
    if value is None or value == BALANCED:
        return None
    path = Path(value)
    return path if path.suffix == ".json" or path.is_file() else None


def named(value: str) -> dict[str, object]:
    """The weights a flag names: a JSON file of {label: weight}, or LABEL=W,LABEL=W."""
    path = weights_file(value)
    if path is not None:
        read = read_json_object(path, "class weights", "a JSON object of label: weight")
        return {str(k): v for k, v in read.items()}
    pairs = [p.partition("=") for p in value.split(",") if p.strip()]
    if not pairs or any(not sep for _, sep, _ in pairs):
        raise BertctlError(f"--class-weights {value!r}: give 'balanced', LABEL=W,LABEL=W or a "
                           f"JSON file of label: weight")
    return {k.strip(): v.strip() for k, _, v in pairs}


def class_weights(value: str | None, classes: np.ndarray, label_list) -> np.ndarray | None:
    """One weight per class of `label_list`, in its order: `balanced` over the training
    `classes`, or those `value` names (a class it does not name weighs 1)."""
    if value is None:
        return None
    if value == BALANCED:
        return balanced(classes, len(label_list), label_list)
    given = named(value)
    unknown = sorted(set(given) - {str(x) for x in label_list})
    if unknown:
        raise BertctlError(f"--class-weights: {', '.join(map(repr, unknown))} not among the "
                           f"task's labels ({', '.join(map(str, label_list))})")
    weights = np.ones(len(label_list))
    for i, label in enumerate(label_list):
        if str(label) in given:
            raw = given[str(label)]
            try:
                w = float(raw)
            except (TypeError, ValueError):
                w = math.nan
            if isinstance(raw, bool) or not math.isfinite(w) or w <= 0:
                raise BertctlError(f"--class-weights: the weight of {label!r} must be a "
                                   f"positive number, got {raw!r}")
            weights[i] = w
    return weights


def class_loss(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor | None,
               smoothing: float) -> torch.Tensor:
    """The cross-entropy of (..., C) logits against `labels` (IGNORE_INDEX: no term), each
    class's term weighted by `weights` and its target smoothed by `smoothing` (torch's
    definitions)."""
    flat = labels.reshape(-1)
    logits = logits.float().reshape(flat.numel(), -1)
    total = F.cross_entropy(logits, flat, weight=weights, ignore_index=IGNORE_INDEX,
                            label_smoothing=smoothing, reduction="sum")
    real = flat != IGNORE_INDEX
    if weights is None:
        return token_mean(total, real.sum(), scope_for(labels))
    return total / weights[flat.clamp(min=0)].mul(real).sum().clamp(min=1e-12)


class ClassLoss(nn.Module):
    """The model trained on the weighted, smoothed cross-entropy of its logits; without labels,
    the model's own outputs. The loop saves the model inside it (`model.`); the stage writes
    `model`."""

    def __init__(self, model: nn.Module, weights: np.ndarray | None, smoothing: float,
                 label_list):
        super().__init__()
        self.model, self.smoothing, self.label_list = model, smoothing, label_list
        self.weights = None if weights is None else torch.tensor(weights, dtype=torch.float32)

    @property
    def packs(self) -> bool:
        return self.model.packs

    def forward(self, labels: torch.Tensor | None = None, **inputs) -> dict[str, torch.Tensor]:
        out = dict(self.model(**inputs))
        if labels is not None:
            weights = None if self.weights is None else self.weights.to(out["logits"].device)
            out["loss"] = class_loss(out["logits"], labels, weights, self.smoothing)
        return out

    def facts(self) -> dict:
        """What the manifest records of the loss."""
        facts: dict = {"label_smoothing": self.smoothing}
        if self.weights is not None:
            facts["class_weights"] = {str(label): round(float(w), 6) for label, w in
                                      zip(self.label_list, self.weights.tolist(), strict=True)}
        return facts
