"""Evaluation metrics in plain numpy.

Each metric follows a reference implementation exactly, and the tests compare them against it on
random inputs: scikit-learn for accuracy, F1, Matthews correlation, macro-F1 and the confusion
matrix; scipy for Pearson and Spearman. Neither library is needed at run time.

Conventions:
- Every function takes `(predictions, labels)` in that order. For the confusion matrix, rows are the
  true labels and columns the predictions, as in scikit-learn.
- Classification predictions and labels are integer class indices; regression ones are floats.
- Empty input raises `BertctlError` (an empty evaluation set is a data problem a user can fix);
  predictions and labels of different lengths raise `ValueError` (a bug in the caller).
- Undefined ratios follow scikit-learn's `zero_division=0`: F1 with no true and no predicted
  positives is 0, and the Matthews correlation of constant predictions or labels is 0.
- Pearson and Spearman of a constant input are `nan`, as scipy returns them (with a warning there).
  `nan` compares False with everything, so a model-selection `value > best` never picks it; a
  writer of strict JSON must turn it into `null`.

`compute_metrics(name, predictions, labels)` gives a task's metric dict by metric name and
`main_metric(name)` the key that model selection maximises (all metrics here are higher-is-better);
the names are a registry (`METRICS`) a plug-in adds to.

SQuAD's exact match and F1 live with the span family (bertctl/tasks/span/metrics.py) and
conlleval's entity-level figures with the tagging family (bertctl/tasks/tagging/metrics.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertctl.errors import BertctlError
from bertctl.registry import Registry


def _pair(predictions, labels, name: str, dtype=None) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(predictions, dtype=dtype).reshape(-1)
    y = np.asarray(labels, dtype=dtype).reshape(-1)
    if p.shape != y.shape:
        raise ValueError(f"{name}: {p.size} predictions but {y.size} labels")
    if p.size == 0:
        raise BertctlError(f"{name}: cannot compute on 0 examples (empty evaluation set)")
    return p, y


def accuracy(predictions, labels) -> float:
    """Fraction of predictions equal to the label."""
    p, y = _pair(predictions, labels, "accuracy")
    return float(np.mean(p == y))


def precision_recall_f1(predictions, labels, positive=1) -> tuple[float, float, float]:
    """Precision, recall and F1 of the `positive` class (binary F1 as scikit-learn, zero_division=0)."""
    p, y = _pair(predictions, labels, "f1")
    pred_pos = p == positive
    true_pos = y == positive
    tp = float(np.sum(pred_pos & true_pos))
    fp = float(np.sum(pred_pos & ~true_pos))
    fn = float(np.sum(~pred_pos & true_pos))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
    return precision, recall, f1


def f1_score(predictions, labels, positive=1) -> float:
    """F1 of the `positive` class, as `sklearn.metrics.f1_score(labels, predictions, pos_label=positive)`."""
    return precision_recall_f1(predictions, labels, positive)[2]


def _classes(p: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted union of the values in both arrays, and each array as indices into it."""
    classes, inverse = np.unique(np.concatenate([y, p]), return_inverse=True)
    inverse = inverse.reshape(-1)
    return classes, inverse[len(y):], inverse[:len(y)]


def confusion_matrix(predictions, labels, num_labels: int | None = None) -> np.ndarray:
    """Counts (true label, prediction) as an int64 matrix: rows are true labels, columns predictions.

    With `num_labels`, values must be class indices in [0, num_labels) and the matrix is
    num_labels × num_labels (classes never seen still get a row and a column). Without it, rows and
    columns are the sorted union of the values seen, as scikit-learn's `confusion_matrix`.
    """
    p, y = _pair(predictions, labels, "confusion_matrix")
    if num_labels is None:
        classes, pi, yi = _classes(p, y)
        k = len(classes)
    else:
        pi, yi, k = p.astype(np.int64), y.astype(np.int64), num_labels
        if pi.min() < 0 or yi.min() < 0 or max(pi.max(), yi.max()) >= k:
            raise ValueError(f"confusion_matrix: values outside [0, {k})")
    return np.bincount(yi * k + pi, minlength=k * k).reshape(k, k).astype(np.int64)


def matthews_corrcoef(predictions, labels) -> float:
    """Matthews correlation coefficient, binary or multiclass (Gorodkin's R_K), as scikit-learn.

    0 when the predictions or the labels are all one class (the ratio is undefined there).
    """
    c = confusion_matrix(predictions, labels).astype(np.float64)
    t_sum = c.sum(axis=1)
    p_sum = c.sum(axis=0)
    n_correct = np.trace(c)
    n = c.sum()
    cov_ytyp = n_correct * n - t_sum @ p_sum
    cov_ypyp = n * n - p_sum @ p_sum
    cov_ytyt = n * n - t_sum @ t_sum
    if cov_ypyp * cov_ytyt == 0:
        return 0.0
    return float(cov_ytyp / np.sqrt(cov_ytyt * cov_ypyp))


def macro_f1(predictions, labels) -> float:
    """Unweighted mean of the per-class F1 over every class seen in labels or predictions,
    as `sklearn.metrics.f1_score(labels, predictions, average="macro")`."""
    c = confusion_matrix(predictions, labels).astype(np.float64)
    tp = np.diag(c)
    denom = c.sum(axis=0) + c.sum(axis=1)  # 2tp + fp + fn
    f1 = np.divide(2 * tp, denom, out=np.zeros_like(tp), where=denom > 0)
    return float(f1.mean())


def pearson(predictions, labels) -> float:
    """Pearson correlation, as `scipy.stats.pearsonr(...)[0]`; nan if either input is constant."""
    x, y = _pair(predictions, labels, "pearson", dtype=np.float64)
    if x.size < 2:
        raise BertctlError("pearson: needs at least 2 examples")
    # Centre, then scale by the largest magnitude first, as scipy does, so huge or tiny values
    # neither overflow nor underflow.
    xm = x - x.mean()
    ym = y - y.mean()
    xmax = np.abs(xm).max()
    ymax = np.abs(ym).max()
    if not (np.isfinite(xmax) and np.isfinite(ymax)) or xmax == 0 or ymax == 0:
        return float("nan")
    xm = xm / xmax
    ym = ym / ymax
    r = float(np.dot(xm / np.linalg.norm(xm), ym / np.linalg.norm(ym)))
    return max(min(r, 1.0), -1.0)


def rankdata(a) -> np.ndarray:
    """Ranks 1..n with ties given their average rank (`scipy.stats.rankdata(a, method="average")`)."""
    a = np.asarray(a).reshape(-1)
    sorter = np.argsort(a, kind="mergesort")
    inv = np.empty(sorter.size, dtype=np.intp)
    inv[sorter] = np.arange(sorter.size, dtype=np.intp)
    arr = a[sorter]
    obs = np.r_[True, arr[1:] != arr[:-1]]
    dense = obs.cumsum()[inv]
    count = np.r_[np.nonzero(obs)[0], len(obs)]
    return 0.5 * (count[dense] + count[dense - 1] + 1)


def spearman(predictions, labels) -> float:
    """Spearman rank correlation with average ranks for ties, as `scipy.stats.spearmanr(...)[0]`;
    nan if either input is constant or holds a nan."""
    x, y = _pair(predictions, labels, "spearman", dtype=np.float64)
    if np.isnan(x).any() or np.isnan(y).any():
        return float("nan")
    return pearson(rankdata(x), rankdata(y))


def label_set_counts(predictions, labels) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per label (column) of (N, L) 0/1 label sets: true positives, false positives, false
    negatives."""
    p = np.asarray(predictions).astype(bool)
    y = np.asarray(labels).astype(bool)
    if p.ndim != 2 or p.shape != y.shape:
        raise ValueError(f"label sets: predictions {p.shape} and labels {y.shape} must be one "
                         f"(examples, labels) shape")
    if not len(p):
        raise BertctlError("label sets: cannot compute on 0 examples (empty evaluation set)")
    tp = (p & y).sum(0).astype(np.float64)
    return tp, (p & ~y).sum(0).astype(np.float64), (~p & y).sum(0).astype(np.float64)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


def multi_label_scores(predictions, labels) -> dict[str, float]:
    """Label sets' figures as scikit-learn gives them with zero_division=0: micro and macro F1,
    micro precision and recall (`f1_score`, `precision_score`, `recall_score` with
    average="micro"/"macro"), subset accuracy (`accuracy_score`: the whole set right) and
    the Hamming loss (`hamming_loss`: the share of wrong example-label cells)."""
    tp, fp, fn = label_set_counts(predictions, labels)
    TP, FP, FN = (float(x.sum()) for x in (tp, fp, fn))
    p = np.asarray(predictions).astype(bool)
    y = np.asarray(labels).astype(bool)
    return {"micro_f1": 2 * TP / (2 * TP + FP + FN) if TP else 0.0,
            "macro_f1": float(_ratio(2 * tp, 2 * tp + fp + fn).mean()),
            "micro_precision": TP / (TP + FP) if TP else 0.0,
            "micro_recall": TP / (TP + FN) if TP else 0.0,
            "subset_accuracy": float((p == y).all(1).mean()),
            "hamming_loss": float((p != y).mean())}


# --- task metrics by name ------------------------------------------------------------------------

def _accuracy(p, y):
    return {"accuracy": accuracy(p, y)}


def _f1_accuracy(p, y):
    return {"f1": f1_score(p, y, positive=1), "accuracy": accuracy(p, y)}


def _matthews(p, y):
    return {"mcc": matthews_corrcoef(p, y), "accuracy": accuracy(p, y)}


def _pearson_spearman(p, y):
    return {"pearson": pearson(p, y), "spearman": spearman(p, y)}


def _macro_f1(p, y):
    return {"macro_f1": macro_f1(p, y), "accuracy": accuracy(p, y)}


@dataclass(frozen=True)
class Metric:
    """A task's figures by name: `compute(predictions, labels)` gives them as a dict, `main`
    the key model selection maximises (higher is better)."""

    name: str
    compute: Callable[[Any, Any], dict[str, float]]
    main: str


# Every metric a task spec may name: the built-ins below; a plug-in registers its own
# (`register(Metric(...))`) when its module is imported.
METRICS: Registry[Metric] = Registry("metric")
register = METRICS.register
register(Metric("accuracy", _accuracy, "accuracy"))
register(Metric("f1_accuracy", _f1_accuracy, "f1"))    # MRPC, QQP: F1 of class index 1, accuracy
register(Metric("matthews", _matthews, "mcc"))         # CoLA
register(Metric("pearson_spearman", _pearson_spearman, "spearman"))  # STS-B: the paper's Spearman
register(Metric("macro_f1", _macro_f1, "macro_f1"))
register(Metric("multi_label", multi_label_scores, "micro_f1"))    # label sets


def compute_metrics(name: str, predictions, labels) -> dict[str, float]:
    """A task's metrics by metric name, e.g. `compute_metrics("f1_accuracy", preds, labels)` ->
    `{"f1": ..., "accuracy": ...}`. Classification predictions are class indices (argmax of the
    logits); regression predictions are the raw scores."""
    return METRICS.get_known(name).compute(predictions, labels)


def main_metric(name: str) -> str:
    """The key of `compute_metrics(name, ...)` that model selection maximises."""
    return METRICS.get_known(name).main


def json_safe(value: Any) -> Any:
    """`value` with every NaN / infinity replaced by None, so it can be written as strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.generic):
        return json_safe(value.item())
    return value
