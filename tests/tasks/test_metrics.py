"""Every metric against its reference implementation (scikit-learn, scipy) on random inputs, and
the SQuAD / conlleval scorers against hand-checked cases of the official scripts' semantics."""

import math
import warnings

import numpy as np
import pytest
import scipy.stats
import sklearn.metrics

from bertctl import metrics
from bertctl.errors import BertctlError

SEEDS = range(8)


def _random_classes(rng, n_classes, n=None):
    n = n or int(rng.integers(1, 60))
    # Skewed class frequencies so some classes are rare or missing.
    probs = rng.dirichlet(np.ones(n_classes) * 0.7)
    return rng.choice(n_classes, size=n, p=probs), rng.choice(n_classes, size=n, p=probs)


@pytest.mark.filterwarnings("ignore:A single label was found")
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n_classes", [2, 3, 5])
def test_classification_metrics_match_sklearn(seed, n_classes):
    rng = np.random.default_rng(seed * 10 + n_classes)
    for _ in range(25):
        y, p = _random_classes(rng, n_classes)
        assert metrics.accuracy(p, y) == pytest.approx(sklearn.metrics.accuracy_score(y, p))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref_mcc = sklearn.metrics.matthews_corrcoef(y, p)
            ref_macro = sklearn.metrics.f1_score(y, p, average="macro", zero_division=0)
            ref_f1 = sklearn.metrics.f1_score(y, p, pos_label=1, average="binary", zero_division=0) \
                if n_classes == 2 else None
        assert metrics.matthews_corrcoef(p, y) == pytest.approx(ref_mcc, abs=1e-12)
        assert metrics.macro_f1(p, y) == pytest.approx(ref_macro, abs=1e-12)
        if ref_f1 is not None:
            assert metrics.f1_score(p, y) == pytest.approx(ref_f1, abs=1e-12)
            prec, rec, _ = metrics.precision_recall_f1(p, y)
            assert prec == pytest.approx(sklearn.metrics.precision_score(y, p, zero_division=0))
            assert rec == pytest.approx(sklearn.metrics.recall_score(y, p, zero_division=0))
        np.testing.assert_array_equal(metrics.confusion_matrix(p, y),
                                      sklearn.metrics.confusion_matrix(y, p))
        np.testing.assert_array_equal(
            metrics.confusion_matrix(p, y, num_labels=n_classes),
            sklearn.metrics.confusion_matrix(y, p, labels=list(range(n_classes))))


@pytest.mark.parametrize("seed", SEEDS)
def test_f1_of_positive_class_with_other_values(seed):
    rng = np.random.default_rng(seed)
    y, p = _random_classes(rng, 2, n=40)
    labels = np.array(["neg", "pos"])
    assert metrics.f1_score(labels[p], labels[y], positive="pos") == pytest.approx(
        sklearn.metrics.f1_score(labels[y], labels[p], pos_label="pos", zero_division=0))


def test_degenerate_classification():
    # Constant predictions and constant labels: sklearn defines MCC 0, F1 0 with no positives.
    assert metrics.matthews_corrcoef([1, 1, 1], [0, 1, 0]) == 0.0
    assert metrics.matthews_corrcoef([0, 1, 0], [1, 1, 1]) == 0.0
    assert metrics.matthews_corrcoef([1, 1], [1, 1]) == 0.0
    assert metrics.f1_score([0, 0], [0, 0]) == 0.0
    assert metrics.matthews_corrcoef([0, 1, 2], [0, 1, 2]) == pytest.approx(1.0)
    assert metrics.matthews_corrcoef([1, 0], [0, 1]) == pytest.approx(-1.0)
    # Large counts must not overflow integer arithmetic.
    rng = np.random.default_rng(0)
    y, p = rng.integers(0, 3, 300_000), rng.integers(0, 3, 300_000)
    p[:200_000] = y[:200_000]
    assert metrics.matthews_corrcoef(p, y) == pytest.approx(sklearn.metrics.matthews_corrcoef(y, p))


@pytest.mark.parametrize("seed", SEEDS)
def test_correlations_match_scipy(seed):
    rng = np.random.default_rng(seed)
    for _ in range(25):
        n = int(rng.integers(3, 80))
        x = rng.normal(size=n) * 10 ** rng.uniform(-3, 3)
        y = x * rng.uniform(-2, 2) + rng.normal(size=n) + rng.uniform(-100, 100)
        assert metrics.pearson(x, y) == pytest.approx(scipy.stats.pearsonr(x, y)[0], abs=1e-10)
        assert metrics.spearman(x, y) == pytest.approx(scipy.stats.spearmanr(x, y)[0], abs=1e-10)
        # STS-B style scores with many ties (multiples of 0.2 between 0 and 5) on both sides.
        a = np.round(rng.uniform(0, 5, n) * 5) / 5
        b = np.round((a + rng.normal(0, 1, n)).clip(0, 5) * 2) / 2
        if np.ptp(a) and np.ptp(b):
            assert metrics.spearman(b, a) == pytest.approx(scipy.stats.spearmanr(b, a)[0], abs=1e-10)
            assert metrics.pearson(b, a) == pytest.approx(scipy.stats.pearsonr(b, a)[0], abs=1e-10)


@pytest.mark.parametrize("seed", SEEDS)
def test_rankdata_matches_scipy(seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 6, size=int(rng.integers(1, 50))).astype(float)
    np.testing.assert_allclose(metrics.rankdata(a), scipy.stats.rankdata(a, method="average"))


def test_constant_correlation_is_nan_as_scipy():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert math.isnan(scipy.stats.pearsonr([1.0, 1.0, 1.0], [1.0, 2.0, 3.0])[0])
        assert math.isnan(scipy.stats.spearmanr([1.0, 1.0, 1.0], [1.0, 2.0, 3.0])[0])
    assert math.isnan(metrics.pearson([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))
    assert math.isnan(metrics.spearman([1.0, 2.0, 3.0], [2.0, 2.0, 2.0]))
    assert math.isnan(metrics.spearman([1.0, float("nan"), 3.0], [1.0, 2.0, 3.0]))
    assert metrics.pearson([1.0, 2.0], [5.0, 3.0]) == pytest.approx(-1.0)


def test_empty_and_mismatched_input():
    for fn in (metrics.accuracy, metrics.f1_score, metrics.matthews_corrcoef, metrics.macro_f1,
               metrics.pearson, metrics.spearman, metrics.confusion_matrix):
        with pytest.raises(BertctlError, match="0 examples"):
            fn([], [])
        with pytest.raises(ValueError, match="2 predictions but 3 labels"):
            fn([1, 0], [1, 0, 1])
    with pytest.raises(BertctlError, match="at least 2"):
        metrics.pearson([1.0], [2.0])


def test_compute_metrics_by_name():
    rng = np.random.default_rng(3)
    y, p = _random_classes(rng, 2, n=50)
    assert metrics.compute_metrics("accuracy", p, y) == {"accuracy": metrics.accuracy(p, y)}
    m = metrics.compute_metrics("f1_accuracy", p, y)
    assert m["f1"] == pytest.approx(sklearn.metrics.f1_score(y, p))
    assert m["accuracy"] == pytest.approx(sklearn.metrics.accuracy_score(y, p))
    assert metrics.compute_metrics("matthews", p, y)["mcc"] == pytest.approx(
        sklearn.metrics.matthews_corrcoef(y, p))
    s, t = rng.uniform(0, 5, 30), rng.uniform(0, 5, 30)
    m = metrics.compute_metrics("pearson_spearman", s, t)
    assert m["spearman"] == pytest.approx(scipy.stats.spearmanr(s, t)[0])
    assert m["pearson"] == pytest.approx(scipy.stats.pearsonr(s, t)[0])
    assert {name: metrics.main_metric(name) for name in metrics.METRICS} == {
        "accuracy": "accuracy", "f1_accuracy": "f1", "matthews": "mcc",
        "pearson_spearman": "spearman", "macro_f1": "macro_f1", "multi_label": "micro_f1"}
    for name in metrics.METRICS:
        sets = name == "multi_label"   # label sets: (examples, labels) 0/1
        pn, yn = (p.reshape(-1, 2), y.reshape(-1, 2)) if sets else (p, y)
        assert metrics.main_metric(name) in metrics.compute_metrics(name, pn, yn)
    with pytest.raises(BertctlError, match="unknown metric 'bleu'"):
        metrics.compute_metrics("bleu", p, y)


def test_a_plugin_registers_a_metric_a_task_scores_by(monkeypatch):
    """A metric is a registry kind: a plug-in registers one, a task spec names it, and the
    family scores and selects by it (here balanced accuracy, against scikit-learn's)."""
    from types import SimpleNamespace

    from bertctl.tasks import get, make_task_spec

    def balanced(p, y):
        p, y = np.asarray(p), np.asarray(y)
        return {"balanced_accuracy": float(np.mean([np.mean(p[y == c] == c)
                                                    for c in np.unique(y)]))}

    monkeypatch.setitem(metrics.METRICS, "balanced_accuracy",
                        metrics.Metric("balanced_accuracy", balanced, "balanced_accuracy"))
    spec = make_task_spec(family="single", text_columns=["sentence"], label_column="label",
                          metric="balanced_accuracy")
    family = get("single")
    rng = np.random.default_rng(5)
    y, p = _random_classes(rng, 3, n=60)
    scored = family.score(p, SimpleNamespace(labels=y), spec, None)
    assert scored["balanced_accuracy"] == pytest.approx(
        sklearn.metrics.balanced_accuracy_score(y, p))
    assert family.main_metric(spec) == "balanced_accuracy"
    with pytest.raises(BertctlError, match="unknown metric 'kappa'"):
        make_task_spec(family="single", text_columns=["sentence"], metric="kappa")
