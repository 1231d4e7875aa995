"""Multi-label classification (a ticket's topics, a comment's kinds of toxicity): a set of
labels per example, one sigmoid per label over the pooled `[CLS]` vector trained with binary
cross-entropy (transformers' multi_label_classification), each label predicted where its
probability reaches its threshold.

The thresholds are 0.5 until finetune tunes one per label on the dev set (the threshold with
the best F1 of that label) and stores them with the model, as span QA stores its no-answer
threshold; eval reads them unless --threshold gives one for every label.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from bertctl import metrics
from bertctl.data import label_columns
from bertctl.tasks.base import check_options, logits_of
from bertctl.tasks.classification import Classification
from bertctl.tasks.registry import register

DEFAULT_THRESHOLD = 0.5


class MultiLabelOptions(BaseModel):
    """The multi-label family's own settings (a task spec's `options`; flags of the same names)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    label_separator: str = Field(",", min_length=1, description="What joins an example's "
                                 "labels in a text cell (default ','); list cells (JSON, "
                                 "Parquet) need none.")
    threshold: float | None = Field(None, gt=0, lt=1, description="Predict a label where its "
                                    "probability reaches this; unset: each label's threshold "
                                    "tuned on the dev set during finetune (else 0.5).",
                                    json_schema_extra={"stages": ("eval",)})


def options(spec) -> MultiLabelOptions:
    return MultiLabelOptions(**spec.options)


@dataclasses.dataclass
class LabelSets:
    """Predictions: each label's probability (N, L) and the labels chosen (N, L, bool)."""

    probabilities: np.ndarray
    chosen: np.ndarray

    def __len__(self) -> int:
        return len(self.chosen)


def best_thresholds(probabilities: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per label, the threshold with the best F1 on these examples: the midpoint below the
    k-th highest probability for the best k (ties in F1: the fewest labels predicted). A label
    without positives here keeps 0.5."""
    n, num = probabilities.shape
    out = np.full(num, DEFAULT_THRESHOLD)
    for j in range(num):      # per label; the work within one is numpy's
        y = labels[:, j] > 0
        positives = int(y.sum())
        if not positives:
            continue
        order = np.argsort(-probabilities[:, j], kind="stable")
        p, hits = probabilities[order, j].astype(np.float64), np.cumsum(y[order])
        # Predicting the k highest: F1 = 2 tp / (k + positives). A cut between equal
        # probabilities cannot be made.
        k = np.arange(1, n + 1)
        cuttable = np.r_[p[:-1] > p[1:], True]
        f1 = np.where(cuttable, 2 * hits / (k + positives), -1.0)
        best = int(np.argmax(f1))
        below = p[best + 1] if best + 1 < n else 0.0
        out[j] = (p[best] + below) / 2
    return out


class MultiLabel(Classification):
    default_metric = "multi_label"
    problem_type = "multi_label_classification"
    options_model = MultiLabelOptions
    soft_targets = {"logits": "labels"}
    feature_heads = ()     # a frozen encoder's heads are trained for one class per example
    class_loss = None      # binary cross-entropy per label: no classes to weigh

    def check_spec(self, spec) -> None:
        self.check_columns(spec, (1, 2))
        self.check_label_list(spec)

    def check_metric(self, spec) -> None:
        metrics.METRICS.known(spec.metric)
        check_options(MultiLabelOptions, spec)
        if spec.metric != "multi_label":
            raise ValueError("a 'multi_label' task is scored with metric 'multi_label' "
                             "(micro and macro F1, subset accuracy)")

    def file_labels(self, column, path, name, spec) -> tuple[str, ...]:
        return label_columns.label_sets_of(column, path, name, options(spec).label_separator)

    def read_labels(self, values, path, column, spec, label_list, first_row=0):
        # read_chunks has the list: the given one, else the whole file's (file_labels)
        return (label_columns.label_sets(values, path, column, options(spec).label_separator,
                                         label_list, first_row), label_list)

    def predictions(self, outputs, features, examples, spec, calibration=None) -> LabelSets:
        logits = logits_of(outputs).astype(np.float64)
        probabilities = 1.0 / (1.0 + np.exp(-logits))
        return LabelSets(probabilities.astype(np.float32),
                         probabilities >= self.thresholds(spec, examples.label_list, calibration))

    @staticmethod
    def thresholds(spec, label_list, calibration: dict | None) -> np.ndarray:
        """Each label's threshold: --threshold, else the tuned one, else 0.5."""
        fixed = options(spec).threshold
        if fixed is not None:
            return np.full(len(label_list), fixed)
        tuned = (calibration or {}).get("thresholds", {})
        return np.array([float(tuned.get(name, DEFAULT_THRESHOLD)) for name in label_list])

    def calibrate(self, predictions: LabelSets, examples, spec) -> dict[str, Any] | None:
        """Each label's threshold with its best dev F1, and the dev figures they give."""
        chosen = best_thresholds(predictions.probabilities, examples.labels)
        tuned = predictions.probabilities >= chosen
        return {"thresholds": {name: float(t)
                               for name, t in zip(examples.label_list, chosen)},
                "dev_at_thresholds": metrics.multi_label_scores(tuned, examples.labels)}

    def score(self, predictions: LabelSets, examples, spec, label_list) -> dict[str, Any]:
        """The label sets' figures and each label's precision, recall, F1 and support."""
        result = dict(metrics.compute_metrics(spec.metric, predictions.chosen, examples.labels))
        tp, fp, fn = metrics.label_set_counts(predictions.chosen, examples.labels)
        names = list(label_list or examples.label_list)
        result["per_label"] = {
            name: {"precision": float(tp[j] / (tp[j] + fp[j])) if tp[j] else 0.0,
                   "recall": float(tp[j] / (tp[j] + fn[j])) if tp[j] else 0.0,
                   "f1": float(2 * tp[j] / (2 * tp[j] + fp[j] + fn[j])) if tp[j] else 0.0,
                   "support": int(tp[j] + fn[j])}
            for j, name in enumerate(names)}
        return result

    def write_predictions(self, directory: Path, predictions: LabelSets, examples, spec,
                          label_list, start: int = 0) -> list[str]:
        """`index<TAB>labels<TAB>probabilities`: the chosen labels joined by the separator
        (empty: none), and every label's probability in label-list order."""
        name, sep = "predictions.tsv", options(spec).label_separator
        names = list(label_list or examples.label_list)
        with open(Path(directory) / name, "a" if start else "w", encoding="utf-8",
                  newline="\n") as f:
            if not start:
                f.write("index\tprediction\tprobabilities\n")
            for i, (row, probs) in enumerate(zip(predictions.chosen, predictions.probabilities),
                                             start):
                chosen = sep.join(names[j] for j in np.flatnonzero(row))
                f.write(f"{i}\t{chosen}\t{' '.join(f'{p:.6g}' for p in probs)}\n")
        return [name]

    def keep(self, predictions, examples):
        return predictions, dataclasses.replace(examples, text_a=[], text_b=None, choices=None)

    def join(self, parts: list):
        first = parts[0][1]
        labels = None if first.labels is None else np.concatenate([e.labels for _, e in parts])
        joined = LabelSets(np.concatenate([p.probabilities for p, _ in parts]),
                           np.concatenate([p.chosen for p, _ in parts]))
        return joined, dataclasses.replace(first, labels=labels)


MULTI_LABEL = register(MultiLabel("multi_label", "Multi-label", 1))
