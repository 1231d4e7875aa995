"""Exact search and the ranking metrics of trec_eval.

`search` scores every query against every document by cosine similarity, a block of the
corpus at a time, keeping each query's best `k` so far: memory is the vectors plus one block
of scores (`QUERY_BLOCK` x `DOC_BLOCK` floats, 64 MB), whatever the corpus's size.

`rank` orders a query's retrieved documents as trec_eval does (score descending, ties by
document id in reverse order), and `evaluate` computes, per query and on average over the
queries the judgements name, trec_eval's definitions (relevant: a judgement >= 1):

- ndcg@10: sum over the first 10 of gain / log2(rank + 1), the gain the judgement's value,
  over the same sum for the judged documents in their best order (trec_eval's ndcg_cut.10);
- recall@10, recall@100: the judged relevant documents in the first k, over all of them;
- map: the mean over the relevant documents of the precision at each one's rank (those not
  retrieved count 0), trec_eval's map over the run as retrieved;
- mrr@10: 1 / the rank of the first relevant document in the first 10, else 0 (trec_eval's
  recip_rank on the run cut to 10).

A query whose judgements hold no relevant document scores 0 on each, as in trec_eval.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

QUERY_BLOCK = 256
DOC_BLOCK = 65_536
METRICS = ("ndcg@10", "mrr@10", "recall@10", "recall@100", "map")


def unit(x: np.ndarray) -> np.ndarray:
    """Rows at unit length, float32 (a cosine is then a dot product); zero rows stay zero."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def search(queries: np.ndarray, documents: Iterable[np.ndarray], k: int
           ) -> tuple[np.ndarray, np.ndarray]:
    """(scores, document indices), both (queries, min(k, documents)), each row best first by
    score: the cosine similarity of every query with every document of `documents` (blocks of
    rows, numbered on from 0 across blocks)."""
    q = unit(queries)
    best_s = np.full((len(q), 0), -np.inf, np.float32)
    best_i = np.zeros((len(q), 0), np.int64)
    start = 0
    for block in documents:
        for a in range(0, len(block), DOC_BLOCK):
            d = unit(block[a:a + DOC_BLOCK])
            ids = np.arange(start + a, start + a + len(d))
            rows_s, rows_i = [], []
            for b in range(0, len(q), QUERY_BLOCK):
                s = np.concatenate([best_s[b:b + QUERY_BLOCK],
                                    q[b:b + QUERY_BLOCK] @ d.T], axis=1)
                i = np.concatenate([best_i[b:b + QUERY_BLOCK],
                                    np.broadcast_to(ids, (len(s), len(ids)))], axis=1)
                if s.shape[1] > k:
                    keep = np.argpartition(-s, k - 1, axis=1)[:, :k]
                    s, i = np.take_along_axis(s, keep, 1), np.take_along_axis(i, keep, 1)
                rows_s.append(s)
                rows_i.append(i)
            best_s, best_i = np.concatenate(rows_s), np.concatenate(rows_i)
        start += len(block)
    order = np.argsort(-best_s, axis=1, kind="stable")
    return np.take_along_axis(best_s, order, 1), np.take_along_axis(best_i, order, 1)


def rank(doc_ids: list[str], scores: list[float]) -> list[tuple[str, float]]:
    """A query's retrieved documents in trec_eval's order: score descending, then document id
    descending (its tie-break), whatever order they came in."""
    return [(doc_ids[i], scores[i]) for i in rank_order(doc_ids, scores)]


def rank_order(doc_ids: list[str], scores: list[float]) -> list[int]:
    """The positions of `rank`'s order (what `search` prints its hits in, as `eval` ranks)."""
    return sorted(range(len(doc_ids)), key=lambda i: (-scores[i], _Reversed(doc_ids[i])))


class _Reversed(str):
    """A string that sorts in reverse order (ties broken by descending document id)."""

    def __lt__(self, other):
        return str.__gt__(self, other)


def query_metrics(ranked: list[str], judged: dict[str, int]) -> dict[str, float]:
    """The metrics of one query's ranked document ids against its judgements."""
    relevant = {d for d, r in judged.items() if r >= 1}
    hits = np.array([d in relevant for d in ranked], dtype=bool)
    out = dict.fromkeys(METRICS, 0.0)
    if not relevant:
        return out
    gains = np.array([max(judged.get(d, 0), 0) for d in ranked[:10]], np.float64)
    discount = 1.0 / np.log2(np.arange(2, 12))
    ideal = np.sort(np.array([r for r in judged.values() if r > 0], np.float64))[::-1][:10]
    out["ndcg@10"] = float((gains * discount[:len(gains)]).sum()
                           / (ideal * discount[:len(ideal)]).sum())
    first = np.flatnonzero(hits[:10])
    out["mrr@10"] = 1.0 / (first[0] + 1) if first.size else 0.0
    out["recall@10"] = hits[:10].sum() / len(relevant)
    out["recall@100"] = hits[:100].sum() / len(relevant)
    at = np.flatnonzero(hits)
    out["map"] = float(((np.arange(len(at)) + 1) / (at + 1)).sum() / len(relevant))
    return {k: float(v) for k, v in out.items()}


def evaluate(run: dict[str, list[str]], qrels: dict[str, dict[str, int]]
             ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """(the mean of each metric over the judged queries, each judged query's metrics): `run`
    maps a query id to its documents best first (`rank`'s order), `qrels` to its judgements."""
    per_query = {q: query_metrics(run.get(q, []), judged) for q, judged in qrels.items()}
    n = len(per_query)
    means = {m: (math.fsum(v[m] for v in per_query.values()) / n if n else float("nan"))
             for m in METRICS}
    return means, per_query


def write_per_query(path, per_query: dict[str, dict[str, float]]) -> None:
    """Each query's metrics as a TSV (query, then METRICS), as eval writes per_query.tsv."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("query\t" + "\t".join(METRICS) + "\n")
        f.writelines(f"{q}\t" + "\t".join(f"{m[k]:.6f}" for k in METRICS) + "\n"
                     for q, m in per_query.items())


__all__ = ["METRICS", "evaluate", "query_metrics", "rank", "search", "unit",
           "write_per_query"]
