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

import hashlib
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertctl.errors import BertctlError
from bertctl.tasks.retrieval import reader
from bertctl.tasks.spec import make_task_spec

FAMILY = "retrieval"   # the family whose models and files this reads
OUTPUT = "pairs.jsonl"


CHUNK = 65_536   # documents read, embedded and looked up at a time


@dataclass(frozen=True)
class Pairs:
    """The training rows (query, positive) and the corpus searched: the distinct positives
    first, then the given corpus's other distinct texts, in file order. The corpus is never
    held: `documents` reads it anew a chunk at a time (its lines `keep` marks: not blank, not
    a positive, not seen before), `texts_of` the few texts the output needs."""

    queries: list[str]
    positives: list[str]
    distinct: list[str]           # the distinct positives: the corpus's first documents
    positive_index: np.ndarray    # (rows,) corpus index of each row's positive
    path: Path | None             # the corpus file, if one was given
    keep: np.ndarray              # (its non-blank lines,) bool: the line is a document
    size: int                     # documents in all
    own: dict[str, int]           # a query's text -> its index, where it is a document

    def documents(self, chunk: int | None = None) -> Iterator[list[str]]:
        chunk = chunk or CHUNK
        for a in range(0, len(self.distinct), chunk):
            yield self.distinct[a:a + chunk]
        if self.path is None:
            return
        texts: list[str] = []
        for kept, text in zip(self.keep, corpus_lines(self.path)):
            if kept:
                texts.append(text)
                if len(texts) == chunk:
                    yield texts
                    texts = []
        if texts:
            yield texts

    def texts_of(self, indices) -> dict[int, str]:
        """{index: text} of these documents (one more pass over the corpus)."""
        wanted = {int(i) for i in np.asarray(indices).reshape(-1)}
        found = {i: self.distinct[i] for i in wanted if i < len(self.distinct)}
        if len(found) < len(wanted):
            start = 0
            for texts in self.documents():
                found.update((start + j, t) for j, t in enumerate(texts)
                             if start + j in wanted)
                start += len(texts)
        return found


def read_pairs(path: Path, columns: list[str] | None, corpus: Path | None) -> Pairs:
    """The rows of a pairs table (its two text columns) and the corpus: the distinct
    positives, and the texts of `corpus` (a .txt file, a line a text; or a BEIR corpus.jsonl,
    title and text) when given, read once here to know which lines are new documents (an
    8-byte digest of each text kept, not the text: a collision, about 1 in 10^12 for ten
    million texts, would merely drop a document)."""
    columns = columns or ["query", "positive"]
    spec = make_task_spec(FAMILY, text_columns=columns)
    parts = list(reader.read_table_chunks(spec, path, rows=None))
    rows = parts[0].texts
    queries, positives = [r[0] for r in rows], [r[1] for r in rows]
    index: dict[str, int] = {}
    for text in positives:
        index.setdefault(text, len(index))
    asked = set(queries)
    own = {q: index[q] for q in asked if q in index}
    size, keep = len(index), bytearray()
    if corpus is not None:
        seen: set[bytes] = set()
        for text in corpus_lines(corpus):
            digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
            new = text not in index and digest not in seen
            keep.append(new)
            if new:
                seen.add(digest)
                if text in asked:
                    own.setdefault(text, size)
                size += 1
    return Pairs(queries, positives, list(index),
                 np.array([index[p] for p in positives], np.int64), corpus,
                 np.frombuffer(bytes(keep), np.bool_), size, own)


def corpus_lines(path: Path) -> Iterator[str]:
    """Each text of a corpus file, streamed: a .txt's non-blank lines, a corpus.jsonl's
    documents (title before text)."""
    if not path.is_file():
        raise BertctlError(f"{path}: no such corpus file")
    if path.suffix == ".jsonl":
        for _, _, text in reader._jsonl(path):
            yield text
        return
    if path.suffix != ".txt":
        raise BertctlError(f"{path}: a corpus is a .txt file (a text a line) or a BEIR "
                           f"corpus.jsonl")
    for part in reader.read_text_chunks(path, rows=CHUNK):
        yield from (row[0] for row in part.texts)


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=8).digest()


def copy_digests(pairs: Pairs, normalize) -> tuple[np.ndarray, np.ndarray]:
    """(documents, 2) digests of what the model reads of each document, streamed (8 bytes
    each, never the texts): its text as `normalize` (the tokenizer's normaliser) makes it, and
    a BEIR document's text without its title; a candidate either of which equals a row's
    positive's is a copy the model cannot tell from it (a case variant for an uncased model,
    the positive with its title joined before it)."""
    out = np.zeros((pairs.size, 2), np.uint64)
    n = 0
    for texts in pairs.documents():
        for t in texts:
            out[n] = int.from_bytes(_digest(normalize(t)), "little")
            n += 1
    out[:, 1] = out[:, 0]
    if pairs.path is not None and pairs.path.suffix == ".jsonl":
        at = len(pairs.distinct)
        for kept, (_, _, title, text) in zip(pairs.keep, reader.jsonl_fields(pairs.path)):
            if kept:
                if title and text:
                    out[at, 1] = int.from_bytes(_digest(normalize(text)), "little")
                at += 1
    return out[:, 0], out[:, 1]


def copies(pairs: Pairs, candidates: np.ndarray, banned: np.ndarray, normalize) -> np.ndarray:
    """(rows, C) True where a candidate not `banned` already is a copy of one of the row's
    query's positives (copy_digests)."""
    whole, untitled = copy_digests(pairs, normalize)
    own: dict[str, set[int]] = {}
    for q, p in zip(pairs.queries, pairs.positive_index):
        own.setdefault(q, set()).add(int(p))
    width = max(len(s) for s in own.values())
    table = np.zeros((len(pairs.queries), width), np.uint64)   # 0: no positive there
    for r, q in enumerate(pairs.queries):
        keys = [whole[i] for i in sorted(own[q])]
        table[r, :len(keys)] = keys
    found = np.zeros(candidates.shape, bool)
    for d in (whole, untitled):
        keys = d[candidates]
        found |= ((keys[:, :, None] == table[:, None, :]) & (table[:, None, :] != 0)).any(-1)
    return found & ~banned


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
    for q, i in pairs.own.items():
        own[q].add(i)
    width = max(len(s) for s in own.values())
    table = np.full((len(pairs.queries), width), -1, np.int64)
    for r, q in enumerate(pairs.queries):
        ids = sorted(own[q])
        table[r, :len(ids)] = ids
    return (candidates[:, :, None] == table[:, None, :]).any(-1)


def select(scores: np.ndarray, candidates: np.ndarray, positive: np.ndarray,
           banned: np.ndarray, g: Guards, copied: np.ndarray | None = None
           ) -> tuple[np.ndarray, np.ndarray, dict]:
    """(chosen (rows, negatives) corpus indices, kept (rows,) bool, counts) from each row's
    ranked candidates (`scores`, `candidates`: (rows, C), best first), its positive's score,
    `banned` (excluded's mask) and `copied` (copies' mask: banned as well, counted apart); see
    the module doc for the order of the guards."""
    removed = Counter({"positives": int(banned.sum())})
    if copied is not None:
        removed["copies"] = int(copied.sum())
        banned = banned | copied
    rank = np.cumsum(~banned, axis=1) - 1            # the rank among the allowed
    in_range = ~banned & (rank >= g.range_min) & (rank < g.range_max)
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
          texts: dict[int, str], teacher: np.ndarray | None = None) -> None:
    """The kept rows as JSON lines: query, positive, negative_1 ... negative_N (texts: the
    chosen documents', `pairs.texts_of`); with a teacher's scores of the kept rows'
    candidates, score_positive, score_negative_1 ... (reader.py reads them as what a student
    imitates)."""
    with open(path, "w", encoding="utf-8") as f:
        for n, r in enumerate(np.flatnonzero(kept)):
            row = {"query": pairs.queries[r], "positive": pairs.positives[r]}
            row.update({f"negative_{i}": texts[j]
                        for i, j in enumerate(chosen[r].tolist(), 1)})
            if teacher is not None:
                names = [k for k in row if k != "query"]
                row.update({f"{reader.TEACHER_PREFIX}{k}": round(float(v), 7)
                            for k, v in zip(names, teacher[n])})
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def check_corpus(pairs: Pairs, g: Guards, where: str) -> None:
    if pairs.size - 1 < g.negatives:
        raise BertctlError(f"{where}: {pairs.size} document(s) to mine from, fewer than "
                           f"a positive and --negatives {g.negatives}")


__all__ = ["FAMILY", "Guards", "OUTPUT", "Pairs", "check_corpus", "copies", "copy_digests",
           "corpus_lines", "excluded", "read_pairs", "select", "write"]
