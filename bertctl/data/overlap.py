"""Word n-gram overlap between task examples and a corpus: the contamination audit's engine.

Text is compared as words: lowercased, accents stripped (the uncased BERT normalizer), split
into runs of letters and digits (punctuation and spacing do not count). A task text of w words is
checked with its n-grams of n = min(ngram, w) words when w >= min_ngram (so an 8-word sentence
matches only as a whole); shorter texts are too short to tell copied text from a common phrase,
and are counted as not audited. An n-gram matches where the same n words follow each other
within one corpus line (sentence).

Scale: the corpus is streamed in batches of lines and never held. A batch is normalised by the
tokenizers library in one call and cut into words by one regular expression; numpy then hashes
every word and every window of words (polynomial hashes from prefix sums, so each costs O(1))
and looks the windows up in the task n-grams' sorted table. Python only sees the matches, which
are verified word by word (a hash collision never counts).
"""

from __future__ import annotations

import re

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
from tokenizers import normalizers

# Lowercase and strip accents as uncased BERT does, keeping the line breaks (clean_text would
# turn them into spaces); CJK characters get spaces around them, so each is a word.
_NORMALIZER = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=True,
                                         strip_accents=True, lowercase=True)
_NOT_WORD = re.compile(r"[^\w\n]+|_+")
# Every ASCII byte that is not a letter, a digit or the line break becomes a space.
_ASCII_WORDS = bytes(b if (chr(b).isalnum() or b == 10 or b >= 128) else 32 for b in range(256))
_P = np.uint64(0x9E3779B97F4A7C15)          # odd, so invertible modulo 2**64
_Q = np.uint64(pow(int(_P), -1, 2 ** 64))


def _powers(base: np.uint64, n: int) -> np.ndarray:
    out = np.full(n, base, np.uint64)
    out[0] = 1
    with np.errstate(over="ignore"):
        return np.cumprod(out, dtype=np.uint64)


class _Powers:
    """P**i and P**-i modulo 2**64, grown as longer batches come."""

    def __init__(self):
        self.p = self.q = np.ones(1, np.uint64)

    def upto(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if len(self.p) < n:
            size = max(n, 2 * len(self.p))
            self.p, self.q = _powers(_P, size), _powers(_Q, size)
        return self.p[:n], self.q[:n]


_POW = _Powers()
_FILTER = 1 << 22


def _span_hashes(values: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The polynomial hash of values[s:e] for every (s, e), modulo 2**64, in O(len(values)):
    with G the prefix sums of values[j] * P**-j, hash = (G[e] - G[s]) * P**(e-1)."""
    p, q = _POW.upto(len(values) + 1)
    with np.errstate(over="ignore"):
        g = np.zeros(len(values) + 1, np.uint64)
        np.cumsum(values.astype(np.uint64) * q[:len(values)], out=g[1:])
        return (g[ends] - g[starts]) * p[ends - 1]


@dataclass
class Words:
    """A batch of lines as words: each word's hash, line, and byte span in `text`."""

    text: bytes
    hashes: np.ndarray
    lines: np.ndarray
    starts: np.ndarray
    ends: np.ndarray

    @classmethod
    def of(cls, lines: list[str]) -> "Words":
        # Most lines are ASCII: lowercasing is all the normalizer would do to them, and a byte
        # table finds their word characters. The others go through the normalizer and a
        # Unicode-aware expression (which leaves ASCII punctuation to the table).
        lines = [line.replace("\n", " ").lower() if line.isascii()
                 else _NOT_WORD.sub(" ", _NORMALIZER.normalize_str(line.replace("\n", " ")))
                 for line in lines]
        text = "\n".join(lines).encode("utf-8").translate(_ASCII_WORDS)
        raw = np.frombuffer(text, np.uint8)
        inside = (raw != 32) & (raw != 10)
        edges = np.diff(np.concatenate([[False], inside, [False]]).astype(np.int8))
        starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
        line_of_byte = np.cumsum(raw == 10)
        return cls(text, _span_hashes(raw, starts, ends),
                   line_of_byte[starts] if len(raw) else np.zeros(0, np.int64), starts, ends)

    def __len__(self) -> int:
        return len(self.hashes)

    def ngrams(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Every n-word window's hash, and whether it lies within one line; window i starts
        at word i."""
        count = len(self) - n + 1
        if count <= 0:
            return np.zeros(0, np.uint64), np.zeros(0, bool)
        first = np.arange(count)
        return (_span_hashes(self.hashes, first, first + n),
                self.lines[first] == self.lines[first + n - 1])

    def words(self, first: int, n: int) -> tuple[str, ...]:
        spans = zip(self.starts[first:first + n].tolist(), self.ends[first:first + n].tolist())
        return tuple(self.text[s:e].decode("utf-8") for s, e in spans)


@dataclass
class Match:
    text: int            # index of the task text (TaskTexts order)
    ngram: str           # the n-gram's words, space-separated
    line: int            # the corpus line (0-based, counted over the whole corpus stream)


@dataclass
class TaskTexts:
    """The audited texts: for each, its n (0: too short); per n, its n-grams' hashes (sorted)
    and, for each hash, the words and the texts having them."""

    ngram: int
    min_ngram: int
    texts: list[str]
    ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    tables: dict[int, np.ndarray] = field(default_factory=dict)
    owners: dict[int, dict[int, tuple[tuple[str, ...], list[int]]]] = field(default_factory=dict)
    filters: dict[int, np.ndarray] = field(default_factory=dict)   # by the hash's low bits

    @classmethod
    def index(cls, texts: list[str], ngram: int = 13, min_ngram: int = 8) -> "TaskTexts":
        self = cls(ngram, min_ngram, texts)
        w = Words.of(texts)
        counts = np.bincount(w.lines, minlength=len(texts))
        self.ns = np.where(counts >= min_ngram, np.minimum(counts, ngram), 0)
        for n in sorted(set(self.ns.tolist()) - {0}):
            hashes, within = w.ngrams(n)
            keep = np.flatnonzero(within & (self.ns[w.lines[:len(hashes)]] == n))
            own = self.owners.setdefault(n, {})
            for i, h in zip(keep.tolist(), hashes[keep].tolist()):
                entry = own.setdefault(h, (w.words(i, n), []))
                text = int(w.lines[i])
                if not entry[1] or entry[1][-1] != text:
                    entry[1].append(text)
            self.tables[n] = np.array(sorted(own), np.uint64)
            self.filters[n] = np.zeros(_FILTER, bool)
            self.filters[n][self.tables[n] & np.uint64(_FILTER - 1)] = True
        return self

    @property
    def audited(self) -> int:
        return int((self.ns > 0).sum())

    def scan(self, lines: Iterable[list[str]]) -> Iterator[Match]:
        """The matches, batch by batch as the corpus streams."""
        first_line = 0
        for batch in lines:
            w = Words.of(batch)
            for n, table in self.tables.items():
                hashes, within = w.ngrams(n)
                # A lookup by the low bits first: few windows are left to search the table for.
                maybe = np.flatnonzero(self.filters[n][hashes & np.uint64(_FILTER - 1)] & within)
                at = np.minimum(np.searchsorted(table, hashes[maybe]), len(table) - 1)
                for pos in maybe[table[at] == hashes[maybe]].tolist():
                    words_, owners = self.owners[n][int(hashes[pos])]
                    if w.words(pos, n) != words_:
                        continue   # a hash collision, not a match
                    for text in owners:
                        yield Match(text, " ".join(words_), first_line + int(w.lines[pos]))
            first_line += len(batch)


@dataclass
class Dropped:
    document: int        # in corpus order, 0 the first
    text: int            # the task text it overlaps (TaskTexts order)
    ngram: str


def without_overlaps(documents: Iterable[list[str]], index: TaskTexts, dropped: list[Dropped],
                     batch_sentences: int = 5000) -> Iterator[list[str]]:
    """The documents (lists of sentences) that share no n-gram with the index's texts, in
    order; each one left out is appended to `dropped`. Documents are checked in batches of
    about `batch_sentences` sentences, so the matcher's per-batch work is amortised."""
    pending: list[list[str]] = []
    size = number = 0
    for doc in documents:
        pending.append(doc)
        size += len(doc)
        if size >= batch_sentences:
            yield from _keep(pending, number, index, dropped)
            number += len(pending)
            pending, size = [], 0
    yield from _keep(pending, number, index, dropped)


def _keep(docs: list[list[str]], first: int, index: TaskTexts,
          dropped: list[Dropped]) -> Iterator[list[str]]:
    ends = np.cumsum([len(d) for d in docs])
    hits: dict[int, Match] = {}
    for m in index.scan([[s for d in docs for s in d]]):
        hits.setdefault(int(np.searchsorted(ends, m.line, side="right")), m)
    for i, doc in enumerate(docs):
        if i in hits:
            dropped.append(Dropped(first + i, hits[i].text, hits[i].ngram))
        else:
            yield doc
