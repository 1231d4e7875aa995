"""From per-window start/end logits to answers: n-best lists, predictions and no-answer odds.

A candidate span (start token s, end token e in one window) is valid when both are passage tokens,
e >= s, e - s + 1 <= max_answer_length, and the window is the one where s has the most context
(so each start is scored once, where the model saw it best). Its score is
start_logit[s] + end_logit[e]. Each window contributes its best pairs among its top `n_best`
valid starts and top `n_best` valid ends; unlike run_squad.py and the transformers example,
invalid positions are masked before taking the top n, so question tokens with high logits
cannot crowd out every valid span.

For SQuAD v2.0 the no-answer score of a question is the lowest [CLS] start+end score over its
windows, i.e. that of the window most confident an answer exists (as run_squad.py and the
transformers example take it: windows without the answer are trained to point at [CLS]). The
null odds are that score minus the best span's; the question is predicted unanswerable when they
exceed the threshold. A question with no valid span at all gets "" and `NO_SPAN_ODDS`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bertctl.tasks.span.reader import SpanExamples
from bertctl.tasks.span.windows import SpanWindows, _ragged_positions

# Null odds of a question with no valid span: "no answer" at every threshold. A large finite
# number rather than infinity, which strict JSON cannot hold.
NO_SPAN_ODDS = 1e9


@dataclass
class SpanPredictions:
    """Per question id, in example order: `predictions` (text, "" for no answer), `nbest`
    (lists of {text, probability, start_logit, end_logit}, best first), `best_spans` (the best
    non-null text whatever the threshold, "" if none: what threshold tuning needs) and, for
    v2.0, `null_odds`."""

    predictions: dict[str, str]
    nbest: dict[str, list[dict]]
    best_spans: dict[str, str]
    null_odds: dict[str, float] | None


def _window_candidates(windows: SpanWindows, start: np.ndarray, end: np.ndarray, n_best: int,
                       max_answer_length: int):
    """Every window's best valid (start, end) pairs: window, start, end, score arrays."""
    n, width = start.shape
    win, pos = _ragged_positions(windows.lengths)
    valid_start = np.zeros((n, width), bool)
    valid_end = np.zeros((n, width), bool)
    passage = windows.char_starts >= 0
    valid_end[win[passage], pos[passage]] = True
    valid_start[win[windows.max_context], pos[windows.max_context]] = True
    s_logit = np.where(valid_start, start, -np.inf)
    e_logit = np.where(valid_end, end, -np.inf)
    k = min(n_best, width)
    top_s = np.argpartition(-s_logit, k - 1, axis=1)[:, :k]
    top_e = np.argpartition(-e_logit, k - 1, axis=1)[:, :k]
    score = (np.take_along_axis(s_logit, top_s, 1)[:, :, None]
             + np.take_along_axis(e_logit, top_e, 1)[:, None, :])
    span = top_e[:, None, :] - top_s[:, :, None]
    score = np.where((span >= 0) & (span < max_answer_length), score, -np.inf).reshape(n, k * k)
    m = min(n_best, k * k)
    best = np.argpartition(-score, m - 1, axis=1)[:, :m]
    best_score = np.take_along_axis(score, best, 1)
    w, j = np.nonzero(np.isfinite(best_score))
    pair = best[w, j]
    return w, top_s[w, pair // k], top_e[w, pair % k], best_score[w, j]


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def postprocess(examples: SpanExamples, windows: SpanWindows, start_logits: np.ndarray,
                end_logits: np.ndarray, *, n_best: int = 20, max_answer_length: int = 30,
                version_2: bool | None = None, null_threshold: float = 0.0) -> SpanPredictions:
    """Answers from the logits of every window.

    `start_logits` / `end_logits`: (num_windows, width) in window order, width at least the
    longest window; positions past a window's length are ignored (any padding value).
    `version_2` defaults to the examples'. A v2.0 question is predicted unanswerable when its
    null odds exceed `null_threshold`.
    """
    version_2 = examples.version_2 if version_2 is None else version_2
    start = np.asarray(start_logits, np.float64)
    end = np.asarray(end_logits, np.float64)
    if start.shape != end.shape or start.ndim != 2 or len(start) != len(windows) \
            or start.shape[1] < windows.lengths.max(initial=0):
        raise ValueError(f"logits of shape {start.shape} / {end.shape} do not fit "
                         f"{len(windows)} windows of up to {windows.lengths.max(initial=0)} tokens")
    w, s, e, score = _window_candidates(windows, start, end, n_best, max_answer_length)
    ex = windows.example_index[w]
    order = np.lexsort((e, s, w, -score, ex))           # by question, best first
    bounds = np.searchsorted(ex[order], np.arange(len(examples) + 1))
    first_win = np.searchsorted(windows.example_index, np.arange(len(examples) + 1))
    null = start[:, 0] + end[:, 0]

    out = SpanPredictions({}, {}, {}, {} if version_2 else None)
    for i, qid in enumerate(examples.ids):
        context = examples.contexts[i]
        entries, seen = [], set()
        for c in order[bounds[i]:bounds[i + 1]]:
            base = windows.offsets[w[c]]
            text = context[windows.char_starts[base + s[c]]:windows.char_ends[base + e[c]]]
            if text in seen:
                continue
            seen.add(text)
            entries.append((score[c], text, start[w[c], s[c]], end[w[c], e[c]]))
            if len(entries) == n_best:
                break
        best_span = entries[0] if entries else None
        if version_2:
            lo, hi = first_win[i], first_win[i + 1]
            nw = lo + int(np.argmin(null[lo:hi]))
            null_entry = (null[nw], "", start[nw, 0], end[nw, 0])
            # The null joins the ranking, and is appended when it ranks below the n best.
            merged = sorted(entries + [null_entry], key=lambda x: -x[0])[:n_best]
            entries = merged if any(x is null_entry for x in merged) else merged + [null_entry]
            odds = null_entry[0] - best_span[0] if best_span else NO_SPAN_ODDS
            out.null_odds[qid] = float(odds)
            answer = best_span[1] if best_span and odds <= null_threshold else ""
        else:
            answer = best_span[1] if best_span else ""
        if not entries:
            entries = [(0.0, "", 0.0, 0.0)]
        probs = _softmax(np.array([x[0] for x in entries], np.float64))
        out.nbest[qid] = [{"text": t, "probability": float(p), "start_logit": float(sl),
                           "end_logit": float(el)} for (_, t, sl, el), p in zip(entries, probs)]
        out.predictions[qid] = answer
        out.best_spans[qid] = best_span[1] if best_span else ""
    return out
