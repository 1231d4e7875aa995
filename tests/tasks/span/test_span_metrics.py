"""SQuAD metrics on known-answer cases worked out by hand from the official scripts' definitions
(evaluate-v1.1.py, evaluate-v2.0.py)."""

import numpy as np
import pytest

from bertctl.errors import BertctlError
from bertctl.tasks.span.metrics import (best_null_threshold, exact_score, f1_score,
                                        normalize_answer, official_best_threshold,
                                        squad_v1_metrics, squad_v2_metrics)


@pytest.mark.parametrize("text, normal", [
    ("The  Quick, brown-fox!", "quick brownfox"),     # punctuation dropped, not made a space
    ("A", ""), ("an apple", "apple"), ("Rock the Casbah", "rock casbah"),
    ("theory Anthem", "theory anthem"),                 # articles only as whole words
    ("the(a)the", "theathe"),          # punctuation goes first: then no article is a word
    ("the (a) the", ""),
    ("\u201cquoted\u201d \u00c9cole", "\u201cquoted\u201d \u00e9cole"),  # only ASCII punctuation
    ("  10th\tand\n11th  ", "10th and 11th"),
])
def test_normalize_answer(text, normal):
    assert normalize_answer(text) == normal


def test_exact_and_f1():
    assert exact_score("Normans", "the Normans.") == 1
    assert exact_score("Norman", "Normans") == 0
    # pred tokens: in 10th and 11th centuries (5), gold: 10th and 11th centuries (4), 4 shared
    assert f1_score("10th and 11th centuries", "in the 10th and 11th centuries") == \
        pytest.approx(2 * 0.8 * 1.0 / 1.8)
    # counted with multiplicity: x x y vs x y y share one x and one y
    assert f1_score("x x y", "x y y") == pytest.approx(2 / 3)
    assert f1_score("x y", "z") == 0.0


def test_empty_answers_v1_against_v2():
    # gold "the" normalises to nothing: v2 counts two empty sides as agreeing, v1 as no overlap
    assert exact_score("the", "") == 1
    assert f1_score("the", "", v2=True) == 1.0
    assert f1_score("the", "", v2=False) == 0.0
    assert f1_score("", "France", v2=True) == 0.0
    assert f1_score("France", "", v2=True) == 0.0


def test_v1_max_over_golds_and_missing_prediction():
    gold = {"a": ["Denmark", "Denmark, Iceland and Norway"], "b": ["y"], "c": ["z w"]}
    preds = {"a": "Denmark, Iceland", "c": "z", "extra": "ignored"}
    # a: exact 0; F1 max(2/3 vs "denmark", 2*1*(2/4)/(1.5) = 2/3) = 2/3; b missing -> 0; c: F1 2/3
    out = squad_v1_metrics(gold, preds)
    assert out == {"exact": 0.0, "f1": pytest.approx(100 * (2 / 3 + 0 + 2 / 3) / 3)}


GOLD = {"q1": ["Denmark", "Denmark, Iceland"], "q2": [], "q3": ["10th century"], "q4": []}
PREDS = {"q1": "denmark", "q2": "", "q3": "the 10th", "q4": "Rollo"}


def test_v2_without_null_odds():
    # per question exact / F1: q1 1/1, q2 1/1 (both empty), q3 0/(P 1, R 1/2 -> 2/3), q4 0/0
    out = squad_v2_metrics(GOLD, PREDS)
    assert out == {
        "exact": 50.0, "f1": pytest.approx(100 * (2 + 2 / 3) / 4), "total": 4,
        "HasAns_exact": 50.0, "HasAns_f1": pytest.approx(100 * (5 / 3) / 2), "HasAns_total": 2,
        "NoAns_exact": 50.0, "NoAns_f1": 50.0, "NoAns_total": 2}
    assert list(out) == ["exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total",
                         "NoAns_exact", "NoAns_f1", "NoAns_total"]


def test_v2_with_null_odds():
    odds = {"q1": -3.0, "q2": 2.0, "q3": 0.5, "q4": 1.5}
    out = squad_v2_metrics(GOLD, PREDS, odds)
    # odds > 1.0 count as "no answer": q4 becomes right (1), q2 stays right
    assert out["exact"] == 75.0
    assert out["f1"] == pytest.approx(100 * (3 + 2 / 3) / 4)
    assert out["NoAns_exact"] == 100.0 and out["HasAns_exact"] == 50.0
    # exact: start 2 (the unanswerable), q1 (-3) +1 -> 3 best; q3 +0; q4 (pred "Rollo") -1; q2 +0
    assert (out["best_exact"], out["best_exact_thresh"]) == (75.0, -3.0)
    # f1: q1 +1 -> 3 at -3; q3 +2/3 -> 3.667 at 0.5 (best); q4 -1; q2 0
    assert out["best_f1"] == pytest.approx(100 * (3 + 2 / 3) / 4)
    assert out["best_f1_thresh"] == 0.5


def test_official_threshold_starts_at_zero_with_everything_unanswered():
    # No answerable question gains anything: the score stays the unanswerable share, and the
    # reported threshold is the initial 0.0 even though all odds are below it.
    gold = {"q1": ["x"], "q2": []}
    preds = {"q1": "y", "q2": "z"}
    out = squad_v2_metrics(gold, preds, {"q1": -5.0, "q2": -4.0})
    assert (out["best_f1"], out["best_f1_thresh"]) == (50.0, 0.0)


def test_threshold_ties_official_order_against_calibration():
    gold = {"q1": [], "q2": ["x"]}
    preds = {"q1": "w", "q2": "x"}
    has = {"q1": False, "q2": True}
    scores = {"q1": 0.0, "q2": 1.0}
    # The official search walks equal odds in file order: q2 first gains before q1 loses, and it
    # reports 100 at threshold 1.0, which in fact answers both (50).
    assert official_best_threshold(preds, scores, {"q2": 1.0, "q1": 1.0}, has) == (100.0, 1.0)
    assert official_best_threshold(preds, scores, {"q1": 1.0, "q2": 1.0}, has) == (50.0, 0.0)
    # Calibration decides a tie as a group: answering both (50) is no better than none (50).
    assert best_null_threshold(gold, preds, {"q2": 1.0, "q1": 1.0}) == (0.0, 50.0)


def test_calibration_known_answer():
    best_spans = {"q1": "denmark", "q2": "Iceland", "q3": "the 10th", "q4": "Rollo"}
    odds = {"q1": -3.0, "q2": 2.0, "q3": 0.5, "q4": 1.5}
    thresh, f1 = best_null_threshold(GOLD, best_spans, odds)
    assert thresh == 0.5 and f1 == pytest.approx(100 * (3 + 2 / 3) / 4)


def _apply(best_spans, odds, thresh):
    return {q: (s if odds[q] <= thresh else "") for q, s in best_spans.items()}


def test_calibration_is_the_best_usable_threshold():
    # Against brute force over every usable threshold, with many ties in the odds.
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta"]
    for trial in range(20):
        n = 12
        gold = {f"q{i}": ([] if rng.random() < 0.5 else
                          [" ".join(rng.choice(words, 2))]) for i in range(n)}
        spans = {q: " ".join(rng.choice(words, int(rng.integers(1, 3)))) for q in gold}
        odds = {q: float(rng.integers(-3, 3)) for q in gold}
        thresh, f1 = best_null_threshold(gold, spans, odds)
        assert squad_v2_metrics(gold, _apply(spans, odds, thresh))["f1"] == pytest.approx(f1)
        values = sorted(set(odds.values()))
        for t in [values[0] - 1.0, *values]:
            assert squad_v2_metrics(gold, _apply(spans, odds, t))["f1"] <= f1 + 1e-9
            if t < thresh:   # the smallest of the best
                assert squad_v2_metrics(gold, _apply(spans, odds, t))["f1"] < f1 - 1e-9


def test_v2_missing_prediction_is_an_error():
    with pytest.raises(BertctlError, match="no prediction for question q2"):
        squad_v2_metrics({"q1": ["x"], "q2": []}, {"q1": "x"})


def test_normalisation_cases():
    from bertctl.tasks.span.metrics import normalize_answer

    assert normalize_answer("The  Quick, brown FOX!") == "quick brown fox"
    assert normalize_answer("an apple a day") == "apple day"
    # Articles only as whole words; punctuation removed before articles ("the-end" -> "theend").
    assert normalize_answer("theater the-end") == "theater theend"
    assert normalize_answer("Denver Broncos.") == "denver broncos"
