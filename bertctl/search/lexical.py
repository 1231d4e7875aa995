"""The baselines a dense model is checked against (`eval --bm25`): BM25 over the same texts,
and the hybrid of the model's ranking with BM25's.

- BM25: bm25s (the search extra; Lucene's variant, k1 1.5, b 0.75, English stop words, words
  of two characters or more lowercased), the texts as the model read them but without its
  prompts.
- Hybrid: reciprocal rank fusion (Cormack et al. 2009): a document's score is the sum over
  the two rankings of 1 / (60 + its rank), over each ranking's top --top-k.
"""

from __future__ import annotations

import numpy as np

from bertctl.errors import BertctlError

RRF_K = 60


def bm25(queries: list[str], documents: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
    """(scores, document indices), (queries, min(k, documents)), each row best first."""
    try:
        import bm25s
    except ImportError:
        raise BertctlError("--bm25 scores BM25 with bm25s, the search extra: "
                           ".venv/bin/pip install -e '.[search]'") from None
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(documents, stopwords="en", show_progress=False),
                    show_progress=False)
    found, scores = retriever.retrieve(bm25s.tokenize(queries, stopwords="en",
                                                      show_progress=False),
                                       k=min(k, len(documents)), show_progress=False)
    return np.asarray(scores, np.float64), np.asarray(found, np.int64)


def fuse(runs: list[dict[str, list[str]]], k: int, ties: str = "id") -> tuple[dict, dict]:
    """(run, scores): each query's documents by reciprocal rank fusion of `runs`, best
    first, at most `k`; equal scores in document id order, or with `ties="first"` in the
    first run's (a reranking's fusion: its two orders of one list tie often)."""
    run, scores = {}, {}
    for q in runs[0]:
        fused: dict[str, float] = {}
        for r in runs:
            for rank, d in enumerate(r.get(q, []), 1):
                fused[d] = fused.get(d, 0.0) + 1.0 / (RRF_K + rank)
        first = {d: i for i, d in enumerate(runs[0][q])} if ties == "first" else {}
        best = sorted(fused.items(), key=lambda p: (-p[1], first.get(p[0], len(first)),
                                                    p[0]))[:k]
        run[q], scores[q] = [d for d, _ in best], [s for _, s in best]
    return run, scores


__all__ = ["RRF_K", "bm25", "fuse"]
