"""Approximate nearest-neighbour search over an embeddings artifact's vectors, with faiss (the
`search` extra): the reference library for it, far beyond what is worth writing here.

- ivf: the vectors clustered (k-means on a sample) into `lists`; a query scans the `probe`
  lists whose centroids are nearest. `lists` unset: 4 x sqrt(n), as faiss's guidelines.
- hnsw: a navigable small-world graph of `m` links a vector, searched with a beam of
  `ef_search` (built with `ef_construction`).
- quantize int8: each value stored in a byte (faiss's 8-bit scalar quantiser, per-dimension
  ranges trained on the sample), a quarter of the memory; none: float32.
- quantize binary: each value's sign, a bit (a thirty-second of the memory), searched by
  Hamming distance (faiss's binary IVF and HNSW); the first RESCORE x k candidates are then
  scored by their cosine with the stored float vectors and the best k kept, as
  sentence-transformers' binary quantisation with rescoring does. Needs a width divisible by 8.

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
from bertctl.search import ranking

FILE = "faiss.index"
BLOCK = 65_536
TRAIN_PER_LIST = 64   # faiss warns below 39 points a centroid; 64 a list, at most 256 x lists
RESCORE = 4           # binary: candidates rescored per result (sentence-transformers' default)


def require():
    """The faiss module; BertctlError naming the extra where it is not installed (callers ask
    before any work, so nothing is half-built)."""
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
    return ranking.unit(np.concatenate(out))


def _bits(x: np.ndarray) -> np.ndarray:
    """Each value's sign as a bit, 8 to a byte: binary quantisation."""
    return np.packbits(np.asarray(x) > 0, axis=1)


def is_binary(index) -> bool:
    return isinstance(index, require().IndexBinary)


def lists_for(n: int, lists: int | None) -> int:
    return max(1, min(n // TRAIN_PER_LIST, lists or int(4 * np.sqrt(n))))


def build(blocks: Sequence[np.ndarray], kind: str, quantize: str, *, lists: int | None,
          m: int, ef_construction: int, seed: int, threads: int | None = None):
    """A faiss index of every row of `blocks` (ids their row numbers across the blocks)."""
    faiss = require()
    if threads:
        faiss.omp_set_num_threads(threads)
    n, dim = sum(len(b) for b in blocks), blocks[0].shape[1]
    ip = faiss.METRIC_INNER_PRODUCT
    sq = faiss.ScalarQuantizer.QT_8bit
    binary = quantize == "binary"
    if binary and dim % 8:
        raise BertctlError(f"--quantize binary packs 8 values a byte: the vectors' {dim} "
                           f"values are not a multiple of 8")
    if binary and kind == "ivf":
        nlist = lists_for(n, lists)
        index = faiss.IndexBinaryIVF(faiss.IndexBinaryFlat(dim), dim, nlist)
        sample = min(n, 4 * TRAIN_PER_LIST * nlist)
    elif binary:
        index = faiss.IndexBinaryHNSW(dim, m)
        index.hnsw.efConstruction = ef_construction
        sample = 0
    elif kind == "ivf":
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
    code = _bits if binary else ranking.unit
    if not index.is_trained:
        rows = np.sort(np.random.default_rng(seed).choice(n, sample, replace=False))
        index.train(code(_rows(blocks, rows)))
    for block in blocks:
        for a in range(0, len(block), BLOCK):
            index.add(code(block[a:a + BLOCK]))
    return index


def tune(index, kind: str, probe: int | None, ef_search: int | None) -> None:
    """The search-time knob of an index of this kind: ivf's probe, hnsw's beam."""
    if kind == "ivf":
        index.nprobe = min(probe, index.nlist)
    else:
        index.hnsw.efSearch = ef_search


def nearest(index, queries: np.ndarray, k: int, blocks: Sequence[np.ndarray] = ()
            ) -> tuple[np.ndarray, np.ndarray]:
    """(scores, rows) as ranking.search gives them; a list shorter than k (an IVF probe of
    few vectors) is padded with row -1 and score -inf. A binary index's candidates are
    rescored with the stored vectors (`blocks`)."""
    q = ranking.unit(queries)
    if not is_binary(index):
        scores, rows = index.search(q, k)
        return np.where(rows < 0, -np.inf, scores).astype(np.float32), rows.astype(np.int64)
    _, rows = index.search(_bits(q), min(RESCORE * k, index.ntotal))
    rows = rows.astype(np.int64)
    found = np.unique(rows[rows >= 0])
    vectors = np.zeros((max(len(found), 1), q.shape[1]), np.float32)
    vectors[:len(found)] = _rows(blocks, found) if len(found) else 0
    where = np.searchsorted(found, np.maximum(rows, 0))
    scores = np.einsum("qd,qkd->qk", q, vectors[where])
    scores[rows < 0] = -np.inf
    best = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    rows, scores = np.take_along_axis(rows, best, 1), np.take_along_axis(scores, best, 1)
    return scores.astype(np.float32), np.where(np.isinf(scores), -1, rows)


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
    _, found = nearest(index, q, depth, blocks)
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
    faiss = require()
    (faiss.write_index_binary if is_binary(index) else faiss.write_index)(index, str(path))


def read(path: Path, binary: bool = False):
    faiss = require()
    try:
        return (faiss.read_index_binary if binary else faiss.read_index)(str(path))
    except RuntimeError as e:
        raise BertctlError(f"{path}: not a faiss index faiss can read ({str(e).splitlines()[0]})"
                           ) from e


__all__ = ["FILE", "build", "is_binary", "lists_for", "nearest", "read", "recall", "require",
           "tune", "write"]
