"""Growing a vocabulary for a domain: the words a corpus uses often and the base vocabulary
splits into many pieces become pieces of their own, after every existing piece, whose ids do
not move. Each kind takes a word its own way: WordPiece as a piece (its longest-match reads it
whole); Unigram as a piece scored just above the best split it replaces (its Viterbi search
then prefers it); BPE, byte-level or not, through merges appended after every existing one,
from the base's split to the word, with the pieces between added too (a BPE merge's product
must be a piece), so every base merge still applies first.

A word w seen f times that the base tokenizer splits into k pieces costs f * (k - 1) tokens more
than it would as one piece; the N words that save most are added (ties: the more frequent, then
the word). Counting happens in the tokenizers library: its word-level trainer finds the
corpus's frequent words (with the base tokenizer's normaliser and pre-tokenizer, so a word is
what the base tokenizer sees as one, Ġ or ▁ and all), a word-level encoding of the corpus
counts them (numpy bincount), and the base model splits each (its `tokenize`). The candidates are the most frequent `candidates(n)` words, so the saving is exact for
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


# A Unigram piece added scores this much times its length squared above the split it replaces.
# Squared, so a word beats every other path through its characters, those through other added
# words too (a word's base split is at least theirs joined, and (a + b)^2 > a^2 + b^2): with one
# margin for all, "alice" + "s" tied "alices". Small, so it rarely outbids a longer word's split.
_UNIGRAM_MARGIN = 0.005
# Rounds of merges appended for BPE words that earlier words' merges led astray (each round
# finishes them from where they stand; two sufficed on every vocabulary tried).
_BPE_ROUNDS = 8


@dataclass(frozen=True)
class Added:
    piece: str
    count: int              # occurrences in the corpus (0: a BPE piece a word is merged through)
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
    model = base.model
    splits = [model.tokenize(w) for w in names]
    pieces = np.array([len(t) for t in splits])
    # BPE merges pieces it has: a word with a character it lacks cannot be built
    unknown = json.loads(base.to_str())["model"].get("unk_token") \
        if isinstance(model, models.BPE) else None
    if unknown is not None:
        unknown = base.token_to_id(unknown)
        pieces[[any(t.id == unknown for t in split) for split in splits]] = 1
    freq = counts[[vocab[w] for w in names]]
    saving = freq * (pieces - 1)
    order = sorted(range(len(names)), key=lambda i: (-saving[i], -freq[i], names[i]))
    return [Added(names[i], int(freq[i]), int(pieces[i])) for i in order[:n] if saving[i] > 0]


def check_extensible(base: Tokenizer, where) -> None:
    """New ids follow the last: refused where the model's own pieces do not run 0..n-1 up to
    the vocabulary's size, or a BPE marks pieces with affixes its merges would have to spell."""
    model = json.loads(base.to_str())["model"]
    kind = model.get("type")
    if kind not in ("WordPiece", "BPE", "Unigram"):
        raise BertctlError(f"{where}: a {kind} tokenizer cannot be extended: only WordPiece, "
                           f"BPE and Unigram")
    if kind == "BPE" and (model.get("continuing_subword_prefix")
                          or model.get("end_of_word_suffix")):
        raise BertctlError(f"{where}: a BPE with a continuing-subword prefix or an end-of-word "
                           f"suffix cannot be extended (its merges' products are spelled "
                           f"otherwise)")
    if base.get_vocab_size(with_added_tokens=False) != base.get_vocab_size():
        raise BertctlError(f"{where}: tokens added after the {kind} model's own pieces "
                           f"({base.get_vocab_size() - base.get_vocab_size(with_added_tokens=False)}"
                           f") hold the ids new pieces would take")


def extend(base: Tokenizer, added: list[Added]) -> tuple[Tokenizer, list[Added]]:
    """The base tokenizer with `added` as pieces after its last id, and every piece added in
    id order (a BPE's pieces between its words' splits and the words among them)."""
    spec = json.loads(base.to_str())
    model = spec["model"]
    kind = model.get("type")
    if kind == "WordPiece":
        vocab = model["vocab"]
        size = base.get_vocab_size()
        for i, a in enumerate(added):
            vocab[a.piece] = size + i
        return Tokenizer.from_str(json.dumps(spec)), list(added)
    if kind == "Unigram":
        return _extend_unigram(base, spec, added), list(added)
    if kind == "BPE":
        return _extend_bpe(base, spec, added)
    raise BertctlError(f"a {kind} tokenizer cannot be extended: only WordPiece, BPE and "
                       f"Unigram")


def _extend_unigram(base: Tokenizer, spec: dict, added: list[Added]) -> Tokenizer:
    """Each word scored `_UNIGRAM_MARGIN` x its length squared above the score of its base
    split (an unknown piece at the library's penalty, 10 below the lowest score): the best path
    through the word is then the word itself."""
    vocab = spec["model"]["vocab"]
    model = base.model
    unknown = spec["model"].get("unk_id")
    penalty = min(score for _, score in vocab) - 10.0
    for a in added:
        split = sum(penalty if t.id == unknown else vocab[t.id][1]
                    for t in model.tokenize(a.piece))
        vocab.append([a.piece, round(split + _UNIGRAM_MARGIN * len(a.piece) ** 2, 6)])
    return Tokenizer.from_str(json.dumps(spec))


def _extend_bpe(base: Tokenizer, spec: dict, added: list[Added]
                ) -> tuple[Tokenizer, list[Added]]:
    """Merges from each word's split to the word, after all the base's. A merge whose product
    is already a piece is preferred (no new piece); else the leftmost pair. An earlier word's
    merges can take a later word another way: each round tokenizes every word with the merges
    so far and finishes those not yet whole from where they stand."""
    model = spec["model"]
    vocab, merges = model["vocab"], model["merges"]
    as_pairs = not merges or isinstance(merges[0], list)
    words = {a.piece: a for a in added}
    new: list[Added] = []
    current = base
    for _ in range(_BPE_ROUNDS):
        pending = [(w, [t.value for t in current.model.tokenize(w)]) for w in words]
        pending = [(w, split) for w, split in pending if len(split) > 1]
        if not pending:
            return current, new
        for word, split in pending:
            while len(split) > 1:
                joined = [split[i] + split[i + 1] for i in range(len(split) - 1)]
                at = next((i for i, j in enumerate(joined) if j in vocab), 0)
                left, right = split[at], split[at + 1]
                merges.append([left, right] if as_pairs else f"{left} {right}")
                if joined[at] not in vocab:
                    vocab[joined[at]] = len(vocab)
                    whole = words.get(joined[at])
                    new.append(whole or Added(joined[at], 0, len(base.model.tokenize(
                        joined[at]))))
                split[at:at + 2] = [joined[at]]
        current = Tokenizer.from_str(json.dumps(spec))
    raise BertctlError(f"{len(pending)} words could not be merged whole in {_BPE_ROUNDS} "
                       f"rounds (first: {pending[0][0]!r})")


def is_extension(base: Tokenizer, extended: Tokenizer) -> bool:
    """Whether every piece of `base` keeps its id in `extended` and the new ids follow."""
    ours, theirs = base.get_vocab(with_added_tokens=True), extended.get_vocab(
        with_added_tokens=True)
    return (len(theirs) > len(ours) and all(theirs.get(t) == i for t, i in ours.items())
            and sorted(theirs.values()) == list(range(len(theirs))))


def base_pieces(base: Tokenizer, extended: Tokenizer) -> list[list[int]]:
    """For each id the extension adds, in order, the ids the base tokenizer splits it into."""
    by_id = {i: t for t, i in extended.get_vocab(with_added_tokens=True).items()}
    model = base.model
    return [[t.id for t in model.tokenize(by_id[i])]
            for i in range(base.get_vocab_size(), extended.get_vocab_size())]
