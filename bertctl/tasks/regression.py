"""Regression on one or two sentences (STS-B's 0-5 similarity): one float per example, a linear
head with one output trained with MSE, scored with Pearson and Spearman."""

from __future__ import annotations

import numpy as np

from bertctl.data import label_columns
from bertctl.tasks.base import logits_of
from bertctl.tasks.classification import SequenceClassifierHead
from bertctl.tasks.registry import register
from bertctl.tasks.sequence import SequenceFamily


class Regression(SequenceClassifierHead, SequenceFamily):
    name = "regression"
    title = "Regression"
    default_metric = "pearson_spearman"
    problem_type = "regression"
    soft_targets = {"logits": "score"}

    def check_spec(self, spec) -> None:
        self.check_columns(spec, (1, 2))
        if spec.labels is not None:
            raise ValueError("a 'regression' task has no label list")

    def check_metric(self, spec) -> None:
        super().check_metric(spec)
        if spec.metric != "pearson_spearman":
            raise ValueError("a 'regression' task is scored with metric 'pearson_spearman'")

    def read_labels(self, values, path, column, spec, label_list, first_row=0):
        return label_columns.float_labels(values, path, column, first_row), None

    def label_range(self, examples) -> list[float] | None:
        labels = examples.labels
        if labels is None or not len(labels):
            return None
        return [float(np.min(labels)), float(np.max(labels))]

    def head_kwargs(self, spec, label_list):
        return {"num_labels": 1, "problem_type": "regression"}

    def predictions(self, outputs, features, examples, spec, calibration=None) -> np.ndarray:
        """The regression value (float32)."""
        logits = logits_of(outputs)
        return logits.reshape(len(logits), -1)[:, 0].astype(np.float32)

    def prediction_values(self, predictions, label_list) -> list[str]:
        return [str(np.float32(v)) for v in predictions]


REGRESSION = register(Regression())
