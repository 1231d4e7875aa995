"""Growing a WordPiece vocabulary for a domain: the words a corpus uses often and the base
vocabulary splits into many pieces become pieces of their own, after every existing piece,
whose ids do not move.

A word w seen f times that the base tokenizer splits into k pieces costs f * (k - 1) tokens more
than it would as one piece; the N words that save most are added (ties: the more frequent, then
the word). Counting happens in the tokenizers library: its word-level trainer finds the
corpus's frequent words (with the base tokenizer's normaliser and pre-tokenizer, so a word is
what the base tokenizer sees as one), a word-level encoding of the corpus counts them (numpy
bincount). The candidates are the most frequent `candidates(n)` words, so the saving is exact for
every word considered; a rare word outside them saves less than the N-th chosen one unless it
is split into very many pieces.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
from tokenizers import Tokenizer, models, trainers

from bertctl.errors import BertctlError

_UNKNOWN = "[UNK]"


def candidates(n: int) -> int:
    return max(50_000, 20 * n)


@dataclass(frozen=True)
class Added:
    piece: str
    count: int              # occurrences in the corpus
    base_pieces: int        # pieces the base tokenizer splits it into


def _unpadded(tok: Tokenizer) -> Tokenizer:
    """A copy that neither pads nor truncates (a saved tokenizer.json may do both), so a word's
    encoding is its pieces."""
    copy = Tokenizer.from_str(tok.to_str())
    copy.no_padding()
    copy.no_truncation()
    return copy


def choose(base: Tokenizer, batches: Callable[[], Iterable[list[str]]], n: int) -> list[Added]:
    """The n words to add: `batches()` streams the corpus (called twice: find, then count)."""
    base = _unpadded(base)
    words = Tokenizer(models.WordLevel(unk_token=_UNKNOWN))
    words.normalizer = base.normalizer
    words.pre_tokenizer = base.pre_tokenizer
    words.train_from_iterator(batches(), trainers.WordLevelTrainer(
        vocab_size=candidates(n) + 1, min_frequency=2, special_tokens=[_UNKNOWN],
        show_progress=False))
    vocab = words.get_vocab()
    counts = np.zeros(len(vocab), np.int64)
    for batch in batches():
        ids = [e.ids for e in words.encode_batch(batch, add_special_tokens=False)]
        if ids:
            counts += np.bincount(np.concatenate([np.asarray(x, np.int64) for x in ids]),
                                  minlength=len(vocab))
    known = base.get_vocab()
    names = sorted((w for w in vocab if w != _UNKNOWN and w not in known), key=vocab.get)
    if not names:
        return []
    pieces = np.array([len(e.ids) for e in base.encode_batch(names, add_special_tokens=False)])
    freq = counts[[vocab[w] for w in names]]
    saving = freq * (pieces - 1)
    order = sorted(range(len(names)), key=lambda i: (-saving[i], -freq[i], names[i]))
    return [Added(names[i], int(freq[i]), int(pieces[i])) for i in order[:n] if saving[i] > 0]


def check_extensible(base: Tokenizer, where) -> None:
    """Only WordPiece grows by whole words: a BPE's piece needs the merges that build it, and a
    Unigram's a score among the others'."""
    kind = json.loads(base.to_str())["model"].get("type")
    if kind != "WordPiece":
        raise BertctlError(f"{where}: a {kind} tokenizer cannot be extended: only BERT's "
                           f"WordPiece")


def extend(base: Tokenizer, added: list[Added]) -> Tokenizer:
    """The base tokenizer with `added` as whole-word pieces after its last id."""
    spec = json.loads(base.to_str())
    model = spec["model"]
    if model.get("type") != "WordPiece":
        raise BertctlError(f"a {model.get('type')} tokenizer cannot be extended: only BERT's "
                           f"WordPiece")
    vocab = model["vocab"]
    size = base.get_vocab_size()
    for i, a in enumerate(added):
        vocab[a.piece] = size + i
    return Tokenizer.from_str(json.dumps(spec))


def is_extension(base: Tokenizer, extended: Tokenizer) -> bool:
    """Whether every piece of `base` keeps its id in `extended` and the new ids follow."""
    ours, theirs = base.get_vocab(with_added_tokens=True), extended.get_vocab(
        with_added_tokens=True)
    return (len(theirs) > len(ours) and all(theirs.get(t) == i for t, i in ours.items())
            and sorted(theirs.values()) == list(range(len(theirs))))


def base_pieces(base: Tokenizer, extended: Tokenizer) -> list[list[int]]:
    """For each id the extension adds, in order, the ids the base tokenizer splits it into."""
    by_id = {i: t for t, i in extended.get_vocab(with_added_tokens=True).items()}
    new = [by_id[i] for i in range(base.get_vocab_size(), extended.get_vocab_size())]
    return [e.ids for e in _unpadded(base).encode_batch(new, add_special_tokens=False)]
