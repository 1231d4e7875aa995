"""SQuAD scores, as the official evaluate-v1.1.py and evaluate-v2.0.py define them.

- Normalisation: lowercase, drop ASCII punctuation (`string.punctuation`), replace the words
  a / an / the by a space, collapse white space.
- Exact match: normalised strings equal. Token F1: over the normalised white-space tokens, counted
  with multiplicity. Both are the maximum over a question's gold answers.
- v1.1: a question with no prediction scores 0; v1.1's F1 is 0 when no token is shared, even if
  both sides normalise to nothing.
- v2.0: gold answers that normalise to "" are dropped, and an unanswerable question's only gold
  answer is ""; F1 is 1 when both sides have no tokens, 0 when only one has none. With null odds
  (the --na-prob-file) a question whose odds exceed `na_prob_thresh` (1.0, the script's default)
  counts as predicted unanswerable in exact / f1 / HasAns / NoAns, whatever its predicted text;
  and best_exact / best_f1 are searched over thresholds as `find_best_thresh` does (see
  `official_best_threshold`). All percentages are 100 * mean.

`best_null_threshold` is the calibration search finetune uses: the null-odds threshold with the
best F1 over thresholds a model can actually use (ties in the odds decided together).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Mapping

from bertctl.errors import BertctlError

_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_score(gold: str, pred: str) -> int:
    return int(normalize_answer(gold) == normalize_answer(pred))


def f1_score(gold: str, pred: str, v2: bool = True) -> float:
    gold_toks, pred_toks = normalize_answer(gold).split(), normalize_answer(pred).split()
    if v2 and (not gold_toks or not pred_toks):
        return float(gold_toks == pred_toks)
    same = sum((Counter(gold_toks) & Counter(pred_toks)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_toks), same / len(gold_toks)
    return 2 * precision * recall / (precision + recall)


def squad_v1_metrics(gold: Mapping[str, list[str]], predictions: Mapping[str, str]) -> dict:
    """exact and f1 (percent) of evaluate-v1.1.py; `gold` maps question id -> answer texts."""
    exact = f1 = 0.0
    for qid, answers in gold.items():
        if qid in predictions:
            exact += max(exact_score(a, predictions[qid]) for a in answers)
            f1 += max(f1_score(a, predictions[qid], v2=False) for a in answers)
    return {"exact": 100.0 * exact / len(gold), "f1": 100.0 * f1 / len(gold)}


def raw_scores(gold: Mapping[str, list[str]], predictions: Mapping[str, str]
               ) -> tuple[dict[str, int], dict[str, float]]:
    """v2.0's per-question exact and F1, before any null-odds threshold."""
    exact, f1 = {}, {}
    for qid, answers in gold.items():
        if qid not in predictions:
            raise BertctlError(f"no prediction for question {qid}")
        golds = [a for a in answers if normalize_answer(a)] or [""]
        exact[qid] = max(exact_score(a, predictions[qid]) for a in golds)
        f1[qid] = max(f1_score(a, predictions[qid]) for a in golds)
    return exact, f1


def official_best_threshold(predictions: Mapping[str, str], scores: Mapping[str, float],
                            null_odds: Mapping[str, float], has_answer: Mapping[str, bool]
                            ) -> tuple[float, float]:
    """(best score in percent, its threshold) exactly as evaluate-v2.0.py's find_best_thresh:
    it starts from "every question unanswerable" scored as the count of unanswerable questions
    with threshold 0.0, walks the questions in increasing odds (a stable sort, so ties in file
    order), adds each one's score if answerable, -1 if unanswerable but given a non-empty
    prediction, and records the odds of a question whenever the running score strictly improves.
    Its threshold may split a group of equal odds, which no real threshold can."""
    current = best = sum(1 for v in has_answer.values() if not v)
    best_thresh = 0.0
    for qid in sorted(null_odds, key=lambda k: null_odds[k]):
        if qid not in scores:
            continue
        if has_answer[qid]:
            current += scores[qid]
        elif predictions[qid]:
            current -= 1
        if current > best:
            best, best_thresh = current, null_odds[qid]
    return 100.0 * best / len(scores), best_thresh


def squad_v2_metrics(gold: Mapping[str, list[str]], predictions: Mapping[str, str],
                     null_odds: Mapping[str, float] | None = None,
                     na_prob_thresh: float = 1.0) -> dict:
    """evaluate-v2.0.py's output for these predictions (and null odds file, if given), keys in
    its order: exact, f1, total, HasAns_*, NoAns_* (each when such questions exist), and with
    null odds best_exact, best_exact_thresh, best_f1, best_f1_thresh."""
    has_answer = {qid: bool(answers) for qid, answers in gold.items()}
    exact_raw, f1_raw = raw_scores(gold, predictions)
    odds = null_odds if null_odds is not None else {qid: 0.0 for qid in predictions}

    def thresholded(raw):
        return {qid: float(not has_answer[qid]) if odds[qid] > na_prob_thresh else s
                for qid, s in raw.items()}

    exact, f1 = thresholded(exact_raw), thresholded(f1_raw)
    out = {"exact": 100.0 * sum(exact.values()) / len(exact),
           "f1": 100.0 * sum(f1.values()) / len(f1), "total": len(exact)}
    for prefix, want in (("HasAns", True), ("NoAns", False)):
        qids = [q for q, v in has_answer.items() if v == want]
        if qids:
            out[f"{prefix}_exact"] = 100.0 * sum(exact[q] for q in qids) / len(qids)
            out[f"{prefix}_f1"] = 100.0 * sum(f1[q] for q in qids) / len(qids)
            out[f"{prefix}_total"] = len(qids)
    if null_odds is not None:
        out["best_exact"], out["best_exact_thresh"] = official_best_threshold(
            predictions, exact_raw, null_odds, has_answer)
        out["best_f1"], out["best_f1_thresh"] = official_best_threshold(
            predictions, f1_raw, null_odds, has_answer)
    return out


def best_null_threshold(gold: Mapping[str, list[str]], best_spans: Mapping[str, str],
                        null_odds: Mapping[str, float]) -> tuple[float, float]:
    """(threshold, F1 in percent): the null-odds threshold that maximises v2.0 F1 when each
    question is answered with its best span if its odds are <= the threshold, else with "".

    Only thresholds a model can use are tried: all questions with equal odds fall on the same
    side. The smallest best threshold is returned; "everything unanswerable" is a threshold 1.0
    below the lowest odds.
    """
    _, f1_answered = raw_scores(gold, best_spans)
    qids = sorted(null_odds, key=lambda k: null_odds[k])
    if not qids:
        raise ValueError("no questions to tune the null threshold on")
    # Start with everything unanswerable: the unanswerable questions are right.
    current = best = float(sum(1 for q in qids if not gold[q]))
    best_thresh = null_odds[qids[0]] - 1.0
    for n, qid in enumerate(qids):
        current += f1_answered[qid] - float(not gold[qid])
        last_of_tie = n + 1 == len(qids) or null_odds[qids[n + 1]] != null_odds[qid]
        if last_of_tie and current > best:
            best, best_thresh = current, null_odds[qid]
    return float(best_thresh), 100.0 * best / len(qids)
