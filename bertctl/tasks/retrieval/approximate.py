"""Approximate nearest-neighbour search over an embeddings artifact's vectors, with faiss (the
`search` extra): the reference library for it, far beyond what is worth writing here.

- ivf: the vectors clustered (k-means on a sample) into `lists`; a query scans the `probe`
  lists whose centroids are nearest. `lists` unset: 4 x sqrt(n), as faiss's guidelines.
- hnsw: a navigable small-world graph of `m` links a vector, searched with a beam of
  `ef_search` (built with `ef_construction`).
- quantize int8: each value stored in a byte (faiss's 8-bit scalar quantiser, per-dimension
  ranges trained on the sample), a quarter of the memory; none: float32.

Every vector is scaled to unit length first and searched by inner product, so a score is the
cosine that exact search (ranking.search) gives. The vectors go in a block at a time from the
memory-mapped shards; the index itself is in memory, as faiss holds it.

`recall` measures what the approximation loses against exact search on the same vectors: a
sample of the stored vectors as queries, each one's own row left out of both lists, and the
share of exact search's first k found among the index's first k.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bertctl.errors import BertctlError
from bertctl.tasks.retrieval import ranking

FILE = "faiss.index"
BLOCK = 65_536
TRAIN_PER_LIST = 64   # faiss warns below 39 points a centroid; 64 a list, at most 256 x lists


def _faiss():
    try:
        import faiss
    except ImportError as e:
        raise BertctlError("an approximate index is built and searched with faiss, the search "
                           "extra: pip install 'bertctl[search]'") from e
    return faiss


def _rows(blocks: Sequence[np.ndarray], rows: np.ndarray) -> np.ndarray:
    """The given rows (sorted) of the blocks numbered on across them, as unit float32."""
    out, start = [], 0
    for block in blocks:
        mine = rows[(rows >= start) & (rows < start + len(block))] - start
        if len(mine):
            out.append(np.asarray(block[mine], np.float32))
        start += len(block)
    return ranking._unit(np.concatenate(out))


def lists_for(n: int, lists: int | None) -> int:
    return max(1, min(n // TRAIN_PER_LIST, lists or int(4 * np.sqrt(n))))


def build(blocks: Sequence[np.ndarray], kind: str, quantize: str, *, lists: int | None,
          m: int, ef_construction: int, seed: int, threads: int | None = None):
    """A faiss index of every row of `blocks` (ids their row numbers across the blocks)."""
    faiss = _faiss()
    if threads:
        faiss.omp_set_num_threads(threads)
    n, dim = sum(len(b) for b in blocks), blocks[0].shape[1]
    ip = faiss.METRIC_INNER_PRODUCT
    sq = faiss.ScalarQuantizer.QT_8bit
    if kind == "ivf":
        nlist = lists_for(n, lists)
        coarse = faiss.IndexFlatIP(dim)
        index = (faiss.IndexIVFScalarQuantizer(coarse, dim, nlist, sq, ip) if quantize == "int8"
                 else faiss.IndexIVFFlat(coarse, dim, nlist, ip))
        index.cp.seed = seed
        sample = min(n, 4 * TRAIN_PER_LIST * nlist)
    else:
        index = (faiss.IndexHNSWSQ(dim, sq, m, ip) if quantize == "int8"
                 else faiss.IndexHNSWFlat(dim, m, ip))
        index.hnsw.efConstruction = ef_construction
        sample = min(n, 100_000)
    if not index.is_trained:
        rows = np.sort(np.random.default_rng(seed).choice(n, sample, replace=False))
        index.train(_rows(blocks, rows))
    for block in blocks:
        for a in range(0, len(block), BLOCK):
            index.add(ranking._unit(block[a:a + BLOCK]))
    return index


def tune(index, kind: str, probe: int, ef_search: int) -> None:
    if kind == "ivf":
        index.nprobe = min(probe, index.nlist)
    else:
        index.hnsw.efSearch = ef_search


def nearest(index, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(scores, rows) as ranking.search gives them; a list shorter than k (an IVF probe of
    few vectors) is padded with row -1 and score -inf."""
    scores, rows = index.search(ranking._unit(queries), k)
    return np.where(rows < 0, -np.inf, scores).astype(np.float32), rows.astype(np.int64)


def recall(index, blocks: Sequence[np.ndarray], k: int, queries: int, seed: int) -> dict:
    """Recall@k of the index against exact search, and each one's milliseconds a query."""
    n = sum(len(b) for b in blocks)
    rows = np.sort(np.random.default_rng(seed + 1).choice(n, min(queries, n), replace=False))
    q = _rows(blocks, rows)
    depth = min(k + 1, n)
    started = time.perf_counter()
    _, exact = ranking.search(q, blocks, depth)
    exact_s = time.perf_counter() - started
    started = time.perf_counter()
    _, found = nearest(index, q, depth)
    approx_s = time.perf_counter() - started
    hits = total = 0
    for row, e, f in zip(rows, exact, found):
        truth = [j for j in e.tolist() if j != row][:k]
        hits += len(set(truth) & set([j for j in f.tolist() if j != row][:k]))
        total += len(truth)
    return {f"recall@{k}": round(hits / max(total, 1), 4), "recall_queries": len(rows),
            "exact_ms_per_query": round(1000 * exact_s / len(rows), 3),
            "ms_per_query": round(1000 * approx_s / len(rows), 3)}


def write(index, path: Path) -> None:
    _faiss().write_index(index, str(path))


def read(path: Path):
    faiss = _faiss()
    try:
        return faiss.read_index(str(path))
    except RuntimeError as e:
        raise BertctlError(f"{path}: not a faiss index faiss can read ({str(e).splitlines()[0]})"
                           ) from e


__all__ = ["FILE", "build", "lists_for", "nearest", "read", "recall", "tune", "write"]
