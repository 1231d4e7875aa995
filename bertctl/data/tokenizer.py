"""The BERT WordPiece tokenizer: training, importing, saving and loading it.

All per-character and per-token work happens inside the `tokenizers` library or numpy. The saved directory
is what `transformers.BertTokenizerFast.from_pretrained` expects, so a bertctl tokenizer is a
Hugging Face tokenizer with no conversion.
"""

from __future__ import annotations

import json
import string
import sys
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from bertctl.errors import BertctlError, DiskFull, is_disk_full

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
# Google's vocabularies put 99 [unused] slots between [PAD] and [UNK] (so [UNK]=100, [CLS]=101,
# [SEP]=102, [MASK]=103) and the rest after [MASK]; we keep that layout so ids match Google's.
_UNUSED_BEFORE_UNK = 99
MODEL_MAX_LENGTH = 512


class EmptyCorpus(BertctlError):
    pass


def reserved_layout(unused_tokens: int) -> list[str]:
    """The special and [unused] tokens, in id order, that open the vocabulary."""
    unused = [f"[unused{i}]" for i in range(unused_tokens)]
    head = min(unused_tokens, _UNUSED_BEFORE_UNK)
    return [PAD, *unused[:head], UNK, CLS, SEP, MASK, *unused[head:]]


def _normalize(tok: Tokenizer, lowercase: bool, strip_accents: bool | None) -> None:
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=strip_accents, lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()


def _configure(tok: Tokenizer, lowercase: bool, strip_accents: bool | None) -> Tokenizer:
    """The full BERT pipeline around a WordPiece model that holds the special tokens.

    Truncation and padding are switched off: an imported tokenizer.json may carry its own, and
    each stage sets the lengths it needs explicitly.
    """
    _normalize(tok, lowercase, strip_accents)
    tok.no_truncation()
    tok.no_padding()
    tok.decoder = decoders.WordPiece(prefix="##")
    cls_id, sep_id = tok.token_to_id(CLS), tok.token_to_id(SEP)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{CLS}:0 $A:0 {SEP}:0",
        pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
        special_tokens=[(CLS, cls_id), (SEP, sep_id)],
    )
    return tok


def check_special_tokens(tok: Tokenizer, where: str) -> None:
    missing = [t for t in SPECIAL_TOKENS if tok.token_to_id(t) is None]
    if missing:
        raise BertctlError(f"{where}: vocabulary lacks the special token(s) {', '.join(missing)}")


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
          limit_alphabet: int = 1000, unused_tokens: int = _UNUSED_BEFORE_UNK) -> Tokenizer:
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
    _normalize(tok, lowercase, strip_accents)
    chars = _CharacterSurvey(tok)
    for batch in survey:
        chars.add(batch)
    alphabet, pieces = chars.alphabet(limit_alphabet)
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, limit_alphabet=max(len(alphabet), 1),
        initial_alphabet=alphabet, special_tokens=reserved + pieces,
        continuing_subword_prefix="##", show_progress=False)
    # An exception raised inside the iterator (a bad file, Ctrl-C) crosses the Rust boundary as
    # a generic error or an early end of input; keep the original and raise it here instead.
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
    return _configure(trained, lowercase, strip_accents)


def read_vocab_file(path: Path) -> dict[str, int]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise BertctlError(f"{path}: no such vocabulary file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BertctlError(f"{path}: cannot read vocabulary: {exc}") from None
    vocab: dict[str, int] = {}
    for lineno, line in enumerate(lines, 1):
        token = line.rstrip("\r\n").strip()
        if not token:
            raise BertctlError(f"{path}:{lineno}: empty line in vocabulary")
        if token in vocab:
            raise BertctlError(f"{path}:{lineno}: duplicate token {token!r}")
        vocab[token] = len(vocab)
    if not vocab:
        raise BertctlError(f"{path}: empty vocabulary")
    return vocab


def from_vocab(path: Path, lowercase: bool, strip_accents: bool | None = None) -> Tokenizer:
    """A tokenizer around an existing vocab.txt (one token per line, id = line number - 1)."""
    vocab = read_vocab_file(path)
    tok = Tokenizer(models.WordPiece(vocab, unk_token=UNK, continuing_subword_prefix="##",
                                     max_input_chars_per_word=100))
    check_special_tokens(tok, str(path))
    return _configure(tok, lowercase, strip_accents)


def from_hf_directory(directory: Path) -> tuple[Tokenizer, bool, bool | None]:
    """Import a local Hugging Face BERT tokenizer directory. Returns it, whether it lowercases
    and whether it strips accents, read from the directory rather than re-typed by the user."""
    cfg_path = directory / "tokenizer_config.json"
    cfg = {}
    if cfg_path.is_file():
        try:
            cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BertctlError(f"{cfg_path}: invalid JSON: {exc}") from None
    tok_json = directory / "tokenizer.json"
    if tok_json.is_file():
        tok = load(tok_json)
        model = json.loads(tok.to_str())["model"]
        if model.get("type") != "WordPiece":
            raise BertctlError(f"{tok_json}: a {model.get('type')} tokenizer, not BERT WordPiece")
        norm = json.loads(tok.to_str()).get("normalizer") or {}
        lowercase = bool(norm.get("lowercase", cfg.get("do_lower_case", True)))
        strip = norm.get("strip_accents", cfg.get("strip_accents"))
        check_special_tokens(tok, str(tok_json))
        return _configure(tok, lowercase, strip), lowercase, strip
    vocab = directory / "vocab.txt"
    if vocab.is_file():
        lowercase = bool(cfg.get("do_lower_case", True))
        strip = cfg.get("strip_accents")
        return from_vocab(vocab, lowercase, strip), lowercase, strip
    raise BertctlError(f"{directory}: not a BERT tokenizer directory "
                       f"(neither tokenizer.json nor vocab.txt)")


def load(path: Path) -> Tokenizer:
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust side raises a bare Exception for any parse problem
        raise BertctlError(f"{path}: cannot load tokenizer: {exc}") from None


@dataclass(frozen=True)
class TokenizerInfo:
    """What later stages must agree on, recorded in every downstream manifest."""

    vocab_size: int
    lowercase: bool
    special_ids: dict[str, int]

    @classmethod
    def of(cls, tok: Tokenizer, lowercase: bool) -> "TokenizerInfo":
        return cls(tok.get_vocab_size(), lowercase,
                   {t: tok.token_to_id(t) for t in SPECIAL_TOKENS})

    def as_dict(self) -> dict:
        return {"vocab_size": self.vocab_size, "lowercase": self.lowercase,
                "special_ids": dict(self.special_ids)}


def check_vocab_agrees(directory: Path) -> None:
    """tokenizer.json and vocab.txt, where a directory has both, must give every token the same
    id: bertctl tokenizes with tokenizer.json, transformers' slow BertTokenizer with vocab.txt,
    so a model shipping two that disagree reads differently in each. BertctlError naming the
    first token that differs."""
    tj, vt = directory / "tokenizer.json", directory / "vocab.txt"
    if not (tj.is_file() and vt.is_file()):
        return
    try:
        model = json.loads(tj.read_text(encoding="utf-8")).get("model", {})
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return   # reading tokenizer.json itself reports it
    if not isinstance(model, dict) or model.get("type") != "WordPiece":
        return
    fast = Tokenizer.from_file(str(tj)).get_vocab(with_added_tokens=True)
    slow = read_vocab_file(vt)
    if fast == slow:
        return
    by_id = {i: t for t, i in fast.items()}
    for token, i in sorted(slow.items(), key=lambda kv: kv[1]):
        if by_id.get(i) != token:
            other = fast.get(token)
            raise BertctlError(
                f"{vt}: disagrees with tokenizer.json: line {i + 1} is {token!r}, which "
                f"tokenizer.json gives {'no id' if other is None else f'id {other}'} (it has "
                f"{by_id.get(i)!r} at id {i})")
    raise BertctlError(f"{vt}: disagrees with tokenizer.json: {len(slow)} tokens against "
                       f"{len(fast)}")


def save(tok: Tokenizer, directory: Path, lowercase: bool, strip_accents: bool | None) -> None:
    """Write tokenizer.json, vocab.txt, tokenizer_config.json and special_tokens_map.json."""
    try:
        tok.save(str(directory / "tokenizer.json"))
    except Exception as exc:  # noqa: BLE001 - tokenizers raises a bare Exception for I/O errors
        if is_disk_full(exc):
            raise DiskFull(directory / "tokenizer.json") from None
        raise
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    (directory / "vocab.txt").write_text("".join(t + "\n" for t, _ in vocab), encoding="utf-8")
    specials = {"unk_token": UNK, "sep_token": SEP, "pad_token": PAD, "cls_token": CLS,
                "mask_token": MASK}
    config = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": lowercase,
        "strip_accents": strip_accents,
        "tokenize_chinese_chars": True,
        "model_max_length": MODEL_MAX_LENGTH,
        "clean_up_tokenization_spaces": False,
        **specials,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n",
                                                      encoding="utf-8")
    (directory / "special_tokens_map.json").write_text(json.dumps(specials, indent=2) + "\n",
                                                        encoding="utf-8")


def measure(tok: Tokenizer, sentences: list[str]) -> dict[str, float]:
    """Unknown-token rate and WordPiece pieces per word on a sample of the corpus."""
    if not sentences:
        return {"unk_rate": 0.0, "pieces_per_word": 0.0}
    unk = tok.token_to_id(UNK)
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
