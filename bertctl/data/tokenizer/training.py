"""Training a tokenizer of each kind on a corpus streamed in batches: WordPiece (Google's
BERT, with its reserved [unused] slots), BPE and Unigram (SentencePiece's Metaspace), byte-level
BPE (GPT-2's and RoBERTa's), each with its text pipeline; what a trained vocabulary measures on
its corpus. The special tokens are specials.py's; the same corpus and settings give the same
tokenizer.json in every process (tests/data/test_tokenize.py)."""

from __future__ import annotations

import json
import string
import sys
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from itertools import chain

import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from bertctl.data.tokenizer.files import bert_normalizer, wordpiece_pipeline
from bertctl.data.tokenizer.specials import (UNK, UNUSED_BEFORE_UNK, Spelling, post_processor,
                                             reserved_layout, special_id)
from bertctl.errors import BertctlError


# The training settings each kind reads (TokenizeSettings' names).
SETTINGS_OF_KIND = {"wordpiece": {"min_frequency", "limit_alphabet", "unused_tokens"},
                    "bpe": {"min_frequency", "limit_alphabet", "unicode"},
                    "byte-level-bpe": {"min_frequency", "unicode"},
                    "unigram": {"unicode"}}


class EmptyCorpus(BertctlError):
    pass


def text_pipeline(tok: Tokenizer, kind: str, lowercase: bool, strip_accents: bool | None,
                  unicode: str | None) -> None:
    """The normaliser, pre-tokenizer and decoder of a kind: WordPiece BERT's own (its
    normaliser cleans, splits CJK characters, lowercases and strips accents as asked); byte-level
    BPE GPT-2's bytes with a space before the first word (so every word's first piece starts
    with Ġ); BPE and Unigram SentencePiece's Metaspace (▁ marks a word's first piece), after the
    Unicode form asked (NFKC unset, as SentencePiece's default)."""
    if kind == "wordpiece":
        bert_normalizer(tok, lowercase, strip_accents)
        tok.decoder = decoders.WordPiece(prefix="##")
        return
    steps = [] if unicode == "none" else [getattr(normalizers, (unicode or "nfkc").upper())()]
    if strip_accents if strip_accents is not None else lowercase:
        steps += [normalizers.NFD(), normalizers.StripAccents()]
    if lowercase:
        steps.append(normalizers.Lowercase())
    tok.normalizer = normalizers.Sequence(steps)
    if kind == "byte-level-bpe":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
        tok.decoder = decoders.ByteLevel()
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()


def _guarded_training(tok: Tokenizer, batches: Iterable[list[str]], trainer) -> None:
    """tok.train_from_iterator, raising what the iterator raised: an exception inside it (a
    bad file, Ctrl-C) crosses the Rust boundary as a generic error or an early end of input."""
    failure: list[BaseException] = []

    def guarded():
        try:
            yield from batches
        except BaseException as exc:
            failure.append(exc)
            raise

    try:
        tok.train_from_iterator(guarded(), trainer=trainer)
    except Exception:
        if not failure:
            raise
    if failure:
        raise failure[0]


class _CharacterSurvey:
    """The characters of a corpus as the WordPiece trainer sees them: how often each occurs in
    words (everything but the spaces the normalizer leaves) and which ones continue a word (follow
    a character of the same word: BertPreTokenizer ends words at spaces and punctuation)."""

    def __init__(self, tok: Tokenizer):
        self.normalizer = tok.normalizer
        size = sys.maxunicode + 1
        self.counts = np.zeros(size, np.int64)
        self.continues = np.zeros(size, bool)
        self.seen = np.zeros(size, bool)
        self.breaks = np.zeros(size, bool)

    def add(self, batch: list[str]) -> None:
        text = self.normalizer.normalize_str("\n".join(batch))
        cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        new = np.unique(cps[~self.seen[cps]])
        # Only characters not met before are classified, so this loop is bounded by the corpus's
        # alphabet, not its length. (The normalizer maps all whitespace to the space.)
        for cp in new.tolist():
            c = chr(cp)
            self.breaks[cp] = c == " " or c in string.punctuation or \
                unicodedata.category(c).startswith("P")
        self.seen[new] = True
        chars, counts = np.unique(cps[cps != ord(" ")], return_counts=True)
        self.counts[chars] += counts
        in_word = ~self.breaks[cps]
        self.continues[cps[1:][in_word[1:] & in_word[:-1]]] = True

    def alphabet(self, limit: int) -> tuple[list[str], list[str]]:
        """The `limit` most frequent characters (ties to the lower code point), and the
        continuation pieces (##c) of those that continue a word, both in code-point order."""
        present = np.flatnonzero(self.counts)
        kept = np.sort(present[np.lexsort((present, -self.counts[present]))[:limit]])
        return ([chr(c) for c in kept.tolist()],
                ["##" + chr(c) for c in kept[self.continues[kept]].tolist()])


def train(survey: Iterable[list[str]], batches: Iterable[list[str]], vocab_size: int,
          lowercase: bool, strip_accents: bool | None = None, min_frequency: int = 2,
          limit_alphabet: int = 1000, unused_tokens: int = UNUSED_BEFORE_UNK) -> Tokenizer:
    """Train WordPiece on batches of sentences; `survey` and `batches` each read the corpus once.
    `strip_accents=None` follows `lowercase`, as Google's uncased models do.

    The same corpus and settings give the same vocabulary in every process. Left to itself the
    trainer gives the continuation pieces (##c) ids in hash-map order, different in each process,
    and those ids break ties between equally frequent merges (huggingface/tokenizers#1794), as
    its alphabet limit breaks ties between equally frequent characters. So a first pass over the
    corpus finds the alphabet and its continuation pieces, and they enter the trainer in a fixed
    order: the alphabet as its initial one, the pieces after the special tokens.
    """
    reserved = reserved_layout(unused_tokens)
    if vocab_size <= len(reserved):
        raise BertctlError(f"vocab_size {vocab_size} leaves no room for words after the "
                           f"{len(reserved)} special and [unused] tokens")
    tok = Tokenizer(models.WordPiece(unk_token=UNK, continuing_subword_prefix="##",
                                     max_input_chars_per_word=100))
    bert_normalizer(tok, lowercase, strip_accents)
    chars = _CharacterSurvey(tok)
    for batch in survey:
        chars.add(batch)
    alphabet, pieces = chars.alphabet(limit_alphabet)
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, limit_alphabet=max(len(alphabet), 1),
        initial_alphabet=alphabet, special_tokens=reserved + pieces,
        continuing_subword_prefix="##", show_progress=False)
    _guarded_training(tok, batches, trainer)
    if not alphabet:
        raise EmptyCorpus("the corpus yielded no words to build a vocabulary from")
    if tok.get_vocab_size() > vocab_size:
        # The trainer keeps every alphabet character even past vocab_size.
        raise BertctlError(f"vocab_size {vocab_size} is smaller than the {len(reserved)} special "
                           f"and [unused] tokens plus the corpus alphabet ({len(alphabet)} "
                           f"characters and {len(pieces)} continuation pieces kept); raise "
                           f"--vocab-size or lower --limit-alphabet")
    # The pieces entered the trainer as special tokens only to fix their ids; the tokenizer holds
    # them as ordinary vocabulary (never matched whole in raw text).
    trained = Tokenizer(models.WordPiece(tok.get_vocab(with_added_tokens=False), unk_token=UNK,
                                         continuing_subword_prefix="##",
                                         max_input_chars_per_word=100))
    trained.add_special_tokens(reserved)
    return wordpiece_pipeline(trained, lowercase, strip_accents)


def train_subwords(batches: Callable[[], Iterable[list[str]]], kind: str, vocab_size: int,
                   lowercase: bool, strip_accents: bool | None, unicode: str | None,
                   spelling: Spelling, min_frequency: int = 2,
                   limit_alphabet: int | None = None) -> Tokenizer:
    """Train a BPE, byte-level BPE or Unigram vocabulary, its special tokens first (RoBERTa's
    spelling in RoBERTa's order: <s> 0, <pad> 1, </s> 2, <unk> 3, <mask> 4; BERT's in its role
    order from [PAD] 0). `batches()` gives the corpus's batches of lines: read once, and by
    Unigram a few times more (`_settled_scores`)."""
    names = spelling.tokens
    specials = [names[r] for r in spelling.order]
    if vocab_size <= len(specials):
        raise BertctlError(f"vocab_size {vocab_size} leaves no room for pieces after the "
                           f"{len(specials)} special tokens")
    if kind == "unigram":
        tok = Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=specials,
                                          unk_token=names[UNK], show_progress=False)
    else:
        byte_level = kind == "byte-level-bpe"
        # Byte-level: every byte is in the alphabet, so nothing is ever unknown.
        tok = Tokenizer(models.BPE() if byte_level else models.BPE(unk_token=names[UNK]))
        extra = ({"initial_alphabet": pre_tokenizers.ByteLevel.alphabet()} if byte_level
                 else {"limit_alphabet": limit_alphabet} if limit_alphabet else {})
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                      special_tokens=specials, show_progress=False, **extra)
    text_pipeline(tok, kind, lowercase, strip_accents, unicode)
    _guarded_training(tok, batches(), trainer)
    if tok.get_vocab_size() <= len(specials) + (256 if kind == "byte-level-bpe" else 0):
        raise EmptyCorpus("the corpus yielded no words to build a vocabulary from")
    if kind == "unigram":
        tok = _settled_scores(tok, len(specials), batches)
    tok.no_truncation()
    tok.no_padding()
    tok.post_processor = post_processor(tok)
    return tok


# The Unigram trainer's scores differ between processes by up to 4e-4 (it iterates hash maps
# seeded per process), so no rounding settles them: pieces near a rounding edge swapped ids.
# Its set of pieces does not vary; their scores are estimated again from that set alone, by
# Viterbi EM over the same text from equal scores: each round segments the text with the
# scores so far (in the library's Viterbi) and sets each piece's score to the log of its share
# of the pieces used. Counts are integers and ties are broken by the pieces' order, so every
# process gets the same bits. On the example corpus at 3,000 pieces the third round already
# segments it into as many pieces as the trainer's scores (215,365 against 215,367).
_EM_ROUNDS = 4


def corpus_reads(kind: str) -> int:
    """How often training a vocabulary of `kind` reads the corpus: WordPiece twice (its
    characters, then its words), BPE once, Unigram once and once per round of its scores."""
    return {"wordpiece": 2, "unigram": 1 + _EM_ROUNDS}.get(kind, 1)


def _settled_scores(tok: Tokenizer, specials: int,
                    batches: Callable[[], Iterable[list[str]]]) -> Tokenizer:
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    pieces = sorted(piece for piece, _ in vocab[specials:])
    scores = np.zeros(len(pieces))
    for _ in range(_EM_ROUNDS):
        spec["model"]["vocab"] = vocab[:specials] + [[p, float(x)] for p, x in zip(pieces, scores)]
        model = Tokenizer.from_str(json.dumps(spec))
        counts = np.zeros(specials + len(pieces), np.int64)
        for batch in batches():
            encodings = model.encode_batch(batch, add_special_tokens=False)
            counts += np.bincount(np.fromiter(chain.from_iterable(e.ids for e in encodings),
                                              np.int64), minlength=len(counts))
        used = counts[specials:]
        if not used.sum():
            break
        logp = np.log(np.maximum(used, 1) / used.sum())
        # a piece no segmentation chose stays usable, below every chosen one
        scores = np.where(used > 0, logp, logp.min() - 1.0)
    order = sorted(range(len(pieces)), key=lambda i: (-scores[i], pieces[i]))
    spec["model"]["vocab"] = vocab[:specials] + [[pieces[i], float(scores[i])] for i in order]
    return Tokenizer.from_str(json.dumps(spec))


def measure(tok: Tokenizer, sentences: list[str]) -> dict[str, float]:
    """Unknown-token rate and pieces per (pre-tokenizer's) word on a sample of the corpus."""
    if not sentences:
        return {"unk_rate": 0.0, "pieces_per_word": 0.0}
    unk = special_id(tok, UNK)
    encodings = tok.encode_batch(sentences, add_special_tokens=False)
    pieces = sum(len(e.ids) for e in encodings)
    unknown = sum(e.ids.count(unk) for e in encodings)
    # Word ids run 0..n-1 within a sentence, so the last one counts its words.
    words = sum(e.word_ids[-1] + 1 for e in encodings if e.word_ids)
    return {"unk_rate": round(unknown / max(pieces, 1), 6),
            "pieces_per_word": round(pieces / max(words, 1), 4)}


def sample_batches(batches: Iterable[list[str]], keep: list[list[str]], every: int = 7,
                   limit: int = 4, per_batch: int = 500) -> Iterator[list[str]]:
    """Pass batches through while keeping a bounded sample spread over the whole corpus for
    `measure`: the head of every `every`-th batch, thinned by half (and `every` doubled) each
    time more than `limit` are kept. About 2,000 sentences estimate the rates well enough, and
    encoding more would add measurably to a small corpus's run."""
    for i, batch in enumerate(batches):
        if i % every == 0:
            keep.append(batch[:per_batch])
            if len(keep) > limit:
                del keep[1::2]
                every *= 2
        yield batch
