"""Hard negatives mined with the model itself (`bertctl mine`): every training query is
searched over a corpus, and the highest-ranked documents that are not its positives become its
hard negatives, in a pairs file `finetune --task retrieval` reads (query, positive,
negative_1 ... negative_N).

A document ranked near the positive may well be relevant too (a false negative: the pairs
name one positive, not every one); the guards are sentence-transformers' mine_hard_negatives'
(its options of the same names), applied in this order:
- every positive the file gives the query (any row of the same query), and the query's own
  text, are never its negatives;
- the ranks: candidates `range_min` to `range_max` of the ranking without those;
- the scores (cosines): at most `max_score`, at least `min_score`; at least `margin` below the
  row's positive's, and at most `(1 - relative_margin)` times it;
- then `negatives` of what is left: the first (`top`) or drawn (`random`). A row left with
  fewer is dropped, as sentence-transformers' n-tuple output drops it; the counts say how
  many rows kept how many candidates and what each guard removed.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertctl.errors import BertctlError
from bertctl.tasks.retrieval import reader
from bertctl.tasks.spec import make_task_spec

FAMILY = "retrieval"   # the family whose models and files this reads
OUTPUT = "pairs.jsonl"


@dataclass(frozen=True)
class Pairs:
    """The training rows (query, positive), the corpus searched (the positives first, then
    the given corpus's other texts) and where each row's positive is in it."""

    queries: list[str]
    positives: list[str]
    corpus: list[str]
    positive_index: np.ndarray   # (rows,) corpus index of each row's positive


def read_pairs(path: Path, columns: list[str] | None, corpus: Path | None) -> Pairs:
    """The rows of a pairs table (its two text columns) and the corpus: the distinct
    positives, and the texts of `corpus` (a .txt file, a line a text; or a BEIR corpus.jsonl,
    title and text) when given."""
    columns = columns or ["query", "positive"]
    spec = make_task_spec(FAMILY, text_columns=columns)
    parts = list(reader.read_table_chunks(spec, path, rows=None))
    rows = parts[0].texts
    queries, positives = [r[0] for r in rows], [r[1] for r in rows]
    index: dict[str, int] = {}
    for text in positives:
        index.setdefault(text, len(index))
    if corpus is not None:
        for text in _corpus_texts(corpus):
            index.setdefault(text, len(index))
    return Pairs(queries, positives, list(index),
                 np.array([index[p] for p in positives], np.int64))


def _corpus_texts(path: Path):
    if not path.is_file():
        raise BertctlError(f"{path}: no such corpus file")
    if path.suffix == ".jsonl":
        for _, _, text in reader._jsonl(path):
            yield text
        return
    if path.suffix != ".txt":
        raise BertctlError(f"{path}: a corpus is a .txt file (a text a line) or a BEIR "
                           f"corpus.jsonl")
    for part in reader.read_text_chunks(path, rows=None):
        yield from (row[0] for row in part.texts)


@dataclass(frozen=True)
class Guards:
    negatives: int = 3
    range_min: int = 0
    range_max: int = 100
    margin: float | None = None
    relative_margin: float | None = None
    max_score: float | None = None
    min_score: float | None = None
    sampling: str = "top"
    seed: int = 0


def excluded(pairs: Pairs, candidates: np.ndarray) -> np.ndarray:
    """(rows, C) True where a candidate is one of the row's query's positives (any row's of
    the same query text) or the query's own text."""
    own: dict[str, set[int]] = {}
    for q, p in zip(pairs.queries, pairs.positive_index):
        own.setdefault(q, set()).add(int(p))
    where = {t: i for i, t in enumerate(pairs.corpus)}
    for q in own:
        if q in where:
            own[q].add(where[q])
    width = max(len(s) for s in own.values())
    table = np.full((len(pairs.queries), width), -1, np.int64)
    for r, q in enumerate(pairs.queries):
        ids = sorted(own[q])
        table[r, :len(ids)] = ids
    return (candidates[:, :, None] == table[:, None, :]).any(-1)


def select(scores: np.ndarray, candidates: np.ndarray, positive: np.ndarray,
           banned: np.ndarray, g: Guards) -> tuple[np.ndarray, np.ndarray, dict]:
    """(chosen (rows, negatives) corpus indices, kept (rows,) bool, counts) from each row's
    ranked candidates (`scores`, `candidates`: (rows, C), best first), its positive's score
    and `banned` (excluded's mask); see the module doc for the order of the guards."""
    rank = np.cumsum(~banned, axis=1) - 1            # the rank among the allowed
    in_range = ~banned & (rank >= g.range_min) & (rank < g.range_max)
    removed = Counter({"positives": int(banned.sum())})
    eligible = in_range.copy()
    bounds = [("max_score", g.max_score is not None and (scores > (g.max_score or 0))),
              ("min_score", g.min_score is not None and (scores < (g.min_score or 0))),
              ("margin", g.margin is not None and
               (scores > positive[:, None] - (g.margin or 0))),
              ("relative_margin", g.relative_margin is not None and
               (scores > positive[:, None] * (1 - (g.relative_margin or 0))))]
    for name, out in bounds:
        if out is not False:
            removed[name] = int((eligible & out).sum())
            eligible &= ~out
    if g.sampling == "random":
        priority = np.random.default_rng(g.seed).random(scores.shape)
    else:
        priority = np.broadcast_to(np.arange(scores.shape[1], dtype=np.float64), scores.shape)
    priority = np.where(eligible, priority, np.inf)
    order = np.argsort(priority, axis=1, kind="stable")[:, :g.negatives]
    chosen = np.take_along_axis(candidates, order, axis=1)
    found = np.minimum(eligible.sum(1), g.negatives)
    kept = found == g.negatives
    counts = {"rows": int(len(kept)), "kept": int(kept.sum()),
              "dropped": int((~kept).sum()),
              "negatives_found": {str(k): int(v) for k, v in
                                  sorted(Counter(found.tolist()).items())},
              "removed_by": dict(removed)}
    return chosen, kept, counts


def write(path: Path, pairs: Pairs, chosen: np.ndarray, kept: np.ndarray,
          teacher: np.ndarray | None = None) -> None:
    """The kept rows as JSON lines: query, positive, negative_1 ... negative_N (texts); with
    a teacher's scores of the kept rows' candidates, score_positive, score_negative_1 ...
    (reader.py reads them as what a student imitates)."""
    with open(path, "w", encoding="utf-8") as f:
        for n, r in enumerate(np.flatnonzero(kept)):
            row = {"query": pairs.queries[r], "positive": pairs.positives[r]}
            row.update({f"negative_{i}": pairs.corpus[j]
                        for i, j in enumerate(chosen[r].tolist(), 1)})
            if teacher is not None:
                names = [k for k in row if k != "query"]
                row.update({f"{reader.TEACHER_PREFIX}{k}": round(float(v), 7)
                            for k, v in zip(names, teacher[n])})
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def check_corpus(pairs: Pairs, g: Guards, where: str) -> None:
    if len(pairs.corpus) - 1 < g.negatives:
        raise BertctlError(f"{where}: {len(pairs.corpus)} document(s) to mine from, fewer than "
                           f"a positive and --negatives {g.negatives}")


__all__ = ["FAMILY", "Guards", "OUTPUT", "Pairs", "check_corpus", "excluded", "read_pairs",
           "select", "write"]
