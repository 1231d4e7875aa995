"""conlleval's figures: entity-level precision, recall and F1 (overall and per type) and token
accuracy, in percent, as the CoNLL shared tasks' `conlleval` script computes them.

Its definitions, from the script's rules:
- Chunks (entities) are read from gold and predicted tags with its chunk rules (`schemes`), each
  sentence start seen after an O. A predicted chunk is correct when a gold chunk has the same
  first word, last word and type.
- precision = correct / predicted chunks, recall = correct / gold chunks, each 0 when its
  denominator is 0; F1 = 2PR / (P + R), 0 when P + R = 0. Per type the same, over the types that
  occur in the gold or the predicted tags.
- accuracy = words whose predicted tag string equals the gold one / words. Sentence boundaries
  (blank lines, `-X-` lines) are not words; every other line is one, a `-DOCSTART-` line too,
  which is why predictions.txt carries no `-DOCSTART-` lines (they are not sentences).

`score` works on tag arrays; `score_lines` reads conlleval's own input (`token ... gold
predicted` per line, blank line between sentences) and gives the same figures as `conlleval <
file`, so tests can check predictions.txt against the metrics written next to it.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from bertctl.errors import BertctlError
from bertctl.tasks.tagging.schemes import chunks, invalid_tags, parse

BOUNDARY = "-X-"


def _prf(correct: int, predicted: int, gold: int) -> dict[str, float]:
    precision = 100.0 * correct / predicted if predicted else 0.0
    recall = 100.0 * correct / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def _keys(ch, type_ids: np.ndarray, n: int, num_types: int) -> np.ndarray:
    """One int64 per chunk: (start, end, type) packed, for set operations."""
    return (ch.start * (n + 1) + ch.end) * num_types + type_ids[ch.type]


def score(gold, predicted, offsets) -> dict:
    """conlleval's figures for gold and predicted tag strings over sentences `offsets`
    (int, num_sentences + 1). Returns precision / recall / f1 / accuracy in percent, the counts
    (tokens, gold_entities, predicted_entities, correct_entities) and `per_type` with each type's
    precision / recall / f1 and counts."""
    gold = np.asarray(gold, dtype=str)
    predicted = np.asarray(predicted, dtype=str)
    offsets = np.asarray(offsets, dtype=np.int64)
    if gold.shape != predicted.shape:
        raise ValueError(f"{predicted.size} predicted tags for {gold.size} gold tags")
    n = gold.size
    if n == 0:
        raise BertctlError("entity scores: cannot compute on 0 tokens (empty evaluation set)")
    for name, tags in (("gold", gold), ("predicted", predicted)):
        bad = invalid_tags(tags)
        if bad.size:
            raise ValueError(f"{name} tag {str(tags[bad[0]])!r} is not O, B-, I-, E- or S-TYPE")
    g, p = parse(gold), parse(predicted)
    types = sorted(set(g.type_names) | set(p.type_names))
    index = {t: i for i, t in enumerate(types)}
    g_ids = np.array([index[t] for t in g.type_names], dtype=np.int64)
    p_ids = np.array([index[t] for t in p.type_names], dtype=np.int64)
    g_ch, p_ch = chunks(g, offsets), chunks(p, offsets)
    g_keys = _keys(g_ch, g_ids, n, len(types))
    p_keys = _keys(p_ch, p_ids, n, len(types))
    _, g_hit, _ = np.intersect1d(g_keys, p_keys, assume_unique=True, return_indices=True)
    per_gold = np.bincount(g_ids[g_ch.type], minlength=len(types))
    per_pred = np.bincount(p_ids[p_ch.type], minlength=len(types))
    per_correct = np.bincount(g_ids[g_ch.type][g_hit], minlength=len(types))
    out = {**_prf(len(g_hit), len(p_keys), len(g_keys)),
           "accuracy": 100.0 * float(np.sum(gold == predicted)) / n,
           "tokens": int(n), "gold_entities": len(g_keys), "predicted_entities": len(p_keys),
           "correct_entities": len(g_hit), "per_type": {}}
    for t, name in enumerate(types):
        c, pr, go = int(per_correct[t]), int(per_pred[t]), int(per_gold[t])
        out["per_type"][name] = {**_prf(c, pr, go), "gold_entities": go,
                                 "predicted_entities": pr, "correct_entities": c}
    return out


def score_lines(lines: Iterable[str]) -> dict:
    """`score` over conlleval input: fields split on single spaces, the last two the gold and
    the predicted tag; a blank line or one whose first field is `-X-` separates sentences (such
    a line must carry O tags: conlleval would count a gold chunk starting on it)."""
    gold, pred, offsets = [], [], [0]
    for lineno, line in enumerate(lines, 1):
        fields = line.rstrip("\r\n").split(" ")
        if fields == [""] or fields[0] == BOUNDARY:
            if len(gold) != offsets[-1]:
                offsets.append(len(gold))
            continue
        if len(fields) < 3:
            raise BertctlError(f"line {lineno}: expected 'token ... gold predicted', "
                               f"got {len(fields)} field(s)")
        gold.append(fields[-2])
        pred.append(fields[-1])
    if len(gold) != offsets[-1]:
        offsets.append(len(gold))
    return score(gold, pred, offsets)
