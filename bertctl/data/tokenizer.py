"""Tokenizers of every kind bertctl trains or reads (WordPiece, BPE, byte-level BPE, Unigram):
their pipelines, special tokens, importing, saving and loading (training: tokenizer_training.py).

The special tokens are named by role under BERT's spelling ([PAD], [UNK], [CLS], [SEP], [MASK]:
what manifests key their ids by); a vocabulary spells them BERT's way or RoBERTa's (<pad>, <unk>,
<s>, </s>, <mask>), and `special_tokens` says which. All per-character and per-token work happens
inside the `tokenizers` library or numpy. The saved directory is what transformers'
`AutoTokenizer.from_pretrained` loads, so a bertctl tokenizer is a Hugging Face tokenizer with no
conversion.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from bertctl.errors import BertctlError, DiskFull, is_disk_full

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)   # the roles
# How each family of vocabularies spells the roles (transformers' names for the spellings).
SPELLINGS = {"bert": dict(zip(SPECIAL_TOKENS, SPECIAL_TOKENS)),
             "roberta": dict(zip(SPECIAL_TOKENS, ("<pad>", "<unk>", "<s>", "</s>", "<mask>")))}
# RoBERTa's order: <s> 0, <pad> 1, </s> 2, <unk> 3 (its padding id places its positions).
ROBERTA_LAYOUT = (CLS, PAD, SEP, UNK, MASK)
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
    tok.post_processor = post_processor(tok)
    return tok


def spelling(tok: Tokenizer) -> str | None:
    """Which family's spelling of the special tokens a vocabulary has (None: neither whole)."""
    for name, tokens in SPELLINGS.items():
        if all(tok.token_to_id(t) is not None for t in tokens.values()):
            return name
    return None


def spelling_for(kind: str, asked: str | None) -> str:
    """The spelling a new vocabulary of `kind` takes: the one asked, else BERT's for WordPiece
    and RoBERTa's for the others. WordPiece has only BERT's ([unused] slots sit among them)."""
    spelling = asked or ("bert" if kind == "wordpiece" else "roberta")
    if kind == "wordpiece" and spelling != "bert":
        raise BertctlError(f"--special-tokens {spelling}: a WordPiece vocabulary spells them "
                           f"BERT's way (train --model bpe, byte-level-bpe or unigram for "
                           f"RoBERTa's)")
    return spelling


def special_tokens(tok: Tokenizer) -> dict[str, str]:
    """role -> the vocabulary's token for it (BERT's spelling when it has neither whole)."""
    return SPELLINGS[spelling(tok) or "bert"]


def special_id(tok: Tokenizer, role: str) -> int | None:
    """The id of a role's token ([CLS]: RoBERTa's <s>), None where the vocabulary lacks it."""
    return tok.token_to_id(special_tokens(tok)[role])


def special_ids(tok: Tokenizer) -> dict[str, int | None]:
    return {role: special_id(tok, role) for role in SPECIAL_TOKENS}


def pair_separators(tok: Tokenizer) -> int:
    """Separators between a pair's two texts: RoBERTa's spelling doubles it (`<s> A </s></s> B
    </s>`), as its tokenizers' pair template does."""
    return 2 if spelling(tok) == "roberta" else 1


def check_special_tokens(tok: Tokenizer, where: str) -> None:
    if spelling(tok) is None:
        missing = [t for t in SPECIAL_TOKENS if tok.token_to_id(t) is None]
        raise BertctlError(f"{where}: vocabulary lacks the special token(s) "
                           f"{', '.join(missing)} (nor has RoBERTa's "
                           f"{', '.join(SPELLINGS['roberta'].values())})")


def post_processor(tok: Tokenizer) -> processors.TemplateProcessing:
    """[CLS] A [SEP] (B [SEP], segment 1) in BERT's spelling; <s> A </s> (</s> B </s>, one
    segment) in RoBERTa's."""
    names = special_tokens(tok)
    cls, sep = names[CLS], names[SEP]
    pair = (f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1" if spelling(tok) != "roberta"
            else f"{cls} $A {sep} {sep} $B {sep}")
    return processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=pair,
        special_tokens=[(cls, tok.token_to_id(cls)), (sep, tok.token_to_id(sep))])


def text_pipeline(tok: Tokenizer, kind: str, lowercase: bool, strip_accents: bool | None,
                  unicode: str | None) -> None:
    """The normaliser, pre-tokenizer and decoder of a kind: WordPiece BERT's own (its
    normaliser cleans, splits CJK characters, lowercases and strips accents as asked); byte-level
    BPE GPT-2's bytes with a space before the first word (so every word's first piece starts
    with Ġ); BPE and Unigram SentencePiece's Metaspace (▁ marks a word's first piece), after the
    Unicode form asked (NFKC unset, as SentencePiece's default)."""
    if kind == "wordpiece":
        _normalize(tok, lowercase, strip_accents)
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


def kind_of(tok: Tokenizer) -> str:
    """The kind of a tokenizer's model (a BPE is byte-level when its pre-tokenizer is)."""
    spec = json.loads(tok.to_str())
    model = (spec.get("model") or {}).get("type")
    if model == "BPE":
        return "byte-level-bpe" if "ByteLevel" in json.dumps(spec.get("pre_tokenizer")) else "bpe"
    return {"WordPiece": "wordpiece", "Unigram": "unigram"}.get(model, str(model).lower())


# The character classes GPT-2's pre-tokenizer parts words by (its regex: runs of letters, of
# digits, of other characters, of white space). NO_CLASS: every piece without a word marker
# continues the one before (WordPiece's ##, Metaspace's ▁ mark every word). ANY: the piece's
# edge is inside a character whose other bytes another piece holds, so it joins its neighbour
# (but white space). SPACE_BEFORE: a piece ends in the space GPT-2 gives the word after it.
# SPACELESS: a character of a script written without spaces between words (CJK ideographs,
# kana, Thai, Lao, Khmer, Myanmar), where a space-split "word" is a whole phrase or line; like
# BERT's own handling of Chinese, each such character (each piece, where one holds several)
# is a word of its own, in every kind.
NO_CLASS, LETTER, DIGIT, SPACE, OTHER, ANY, SPACE_BEFORE, SPACELESS = 0, 1, 2, 3, 4, 5, 6, 7

_SPACELESS_RANGES = (
    (0x0E00, 0x0EFF), (0x1000, 0x109F), (0x1780, 0x17FF),   # Thai, Lao; Myanmar; Khmer
    (0x3040, 0x30FF), (0x31F0, 0x31FF), (0xFF66, 0xFF9F),   # kana, halfwidth katakana
    (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF),   # CJK ideographs (BERT's ranges)
    (0x20000, 0x2FA1F))


def spaceless(c: str) -> bool:
    code = ord(c)
    return any(lo <= code <= hi for lo, hi in _SPACELESS_RANGES)


@dataclass(frozen=True)
class WordMarks:
    """Where a vocabulary's words begin, per id: `marked` pieces begin a word whatever comes
    before them (no `##`; a Ġ or ▁ in front; special tokens); another piece begins one when its
    first character's class differs from the last one's of the piece before it (byte-level BPE:
    "(word" is two words, as GPT-2's pre-tokenizer makes it); a piece at a character of a
    script written without spaces begins one in every kind (`spaceless`). Whole-word masking groups a
    word's pieces by it, in numpy over token ids, so it needs no word ids stored with the data;
    tests/test_tokenizer_kinds.py holds it to the pre-tokenizer's own word ids on real text."""

    marked: np.ndarray   # bool per id
    first: np.ndarray    # int8 per id: the class of its first character
    last: np.ndarray     # int8 per id: the class of its last character

    def begins(self, prev_ids: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Whether each piece of `ids` begins a word after the piece in `prev_ids`."""
        first, last = self.first[ids], self.last[prev_ids]
        joins = ((first == last) | (last == SPACE_BEFORE)
                 | (((first == ANY) | (last == ANY)) & (first != SPACE)))
        # (a piece of the space marker alone joins the word after it, as GPT-2's " word")
        alone = (((first == SPACELESS) & (last != SPACE_BEFORE))
                 | ((last == SPACELESS) & (first != ANY)))
        return self.marked[ids] | ~joins | alone


def _byte_chars() -> dict[str, int]:
    """GPT-2's byte-level alphabet: the character standing for each byte (printable Latin-1
    bytes for themselves, the rest shifted past 255)."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    others = [b for b in range(256) if b not in printable]
    return {**{chr(b): b for b in printable},
            **{chr(256 + n): b for n, b in enumerate(others)}}


def _char_class(c: str) -> int:
    if spaceless(c):
        return SPACELESS
    cat = unicodedata.category(c)
    return LETTER if cat[0] == "L" else DIGIT if cat[0] == "N" else \
        SPACE if c.isspace() else OTHER


def _width(lead: int) -> int:
    """Bytes of the UTF-8 character this lead byte begins."""
    return 1 if lead < 0x80 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4


def _prefix_class(prefix: bytes) -> int:
    """The class of a character of which a piece holds only the first bytes: the most common
    class among the characters those bytes can begin (e.g. 0xC3: Latin-1 letters)."""
    width = _width(prefix[0])
    lo, hi = (int.from_bytes(prefix + fill * (width - len(prefix)), "big")
              for fill in (b"\x80", b"\xbf"))
    chars = []
    for x in range(lo, hi + 1, max(1, (hi - lo) // 256)):
        try:
            chars.append(x.to_bytes(width, "big").decode("utf-8"))
        except UnicodeDecodeError:
            pass
    if not chars:
        return ANY
    return int(np.bincount([_char_class(c) for c in chars], minlength=SPACELESS + 1).argmax())


def _byte_piece_classes(piece: bytes) -> tuple[int, int]:
    """(first, last) class of a byte-level piece, ANY where that edge splits a character."""
    first = ANY
    if piece[0] & 0xC0 != 0x80:
        head = piece[:_width(piece[0])]
        try:
            first = (_char_class(head.decode("utf-8")) if len(head) == _width(piece[0])
                     else _prefix_class(head))
        except UnicodeDecodeError:
            pass
    if piece[-1:] == b" ":
        return first, SPACE_BEFORE
    end = len(piece) - 1
    while end > 0 and piece[end] & 0xC0 == 0x80:
        end -= 1
    tail = piece[end:]
    if tail[0] & 0xC0 == 0x80 or len(tail) != _width(tail[0]):
        return first, ANY
    try:
        return first, _char_class(tail.decode("utf-8"))
    except UnicodeDecodeError:
        return first, ANY


def _spaceless_edges(text: str) -> tuple[int, int]:
    """(first, last) class of a piece of a kind whose words the pieces' markers give: SPACELESS
    at an edge that is such a character, else NO_CLASS (the marker decides)."""
    if not text:
        return NO_CLASS, NO_CLASS
    return (SPACELESS if spaceless(text[0]) else NO_CLASS,
            SPACELESS if spaceless(text[-1]) else NO_CLASS)


def _pre_tokenizers(spec: dict | None) -> list[dict]:
    """The steps of a pre-tokenizer's JSON, a Sequence's flattened."""
    if not spec:
        return []
    if spec.get("type") == "Sequence":
        return [p for step in spec.get("pretokenizers") or [] for p in _pre_tokenizers(step)]
    return [spec]


def word_marks(tok: Tokenizer) -> WordMarks:
    """Each piece's word marks, read off the vocabulary and its pre-tokenizer: WordPiece's
    `##` continuations; Metaspace's ▁; byte-level BPE's Ġ, and GPT-2's classes of characters
    (a byte-level pre-tokenizer without its regex splits at spaces alone)."""
    vocab = tok.get_vocab(with_added_tokens=True)
    n = tok.get_vocab_size(with_added_tokens=True)
    marked = np.zeros(n, bool)
    first, last = np.zeros(n, np.int8), np.zeros(n, np.int8)
    spec = json.loads(tok.to_str())
    model = spec.get("model") or {}
    prefix = model.get("continuing_subword_prefix")
    byte_level = [p for p in _pre_tokenizers(spec.get("pre_tokenizer"))
                  if p.get("type") == "ByteLevel"]
    classes = any(p.get("use_regex", True) for p in byte_level)
    chars = _byte_chars()
    for token, i in vocab.items():
        if i >= n or not token:
            continue
        if model.get("type") == "WordPiece" or prefix:
            marked[i] = not token.startswith(prefix or "##")
            text = token[len(prefix or "##"):] if not marked[i] else token
            first[i], last[i] = _spaceless_edges(text)
        elif byte_level:
            if any(c not in chars for c in token):
                marked[i] = True       # an added token, not byte-level text
                continue
            piece = bytes(chars[c] for c in token)
            # white space alone joins the white space before it (one word of it)
            marked[i] = piece[:1] == b" " and not piece.isspace()
            if classes:
                first[i], last[i] = _byte_piece_classes(piece)
        else:
            marked[i] = token.startswith("▁")
            first[i], last[i] = _spaceless_edges(token.lstrip("▁"))
            if token == "▁":
                last[i] = SPACE_BEFORE
    # An unknown piece of BPE or Unigram stands for characters inside a word (WordPiece's for
    # a whole word); the other special tokens are words of their own.
    unknown = model.get("unk_token") if model.get("type") in ("BPE", "Unigram") else None
    if model.get("type") == "Unigram" and model.get("unk_id") is not None:
        unknown = model["vocab"][model["unk_id"]][0]
    for added in spec.get("added_tokens") or []:
        if added.get("special") and added.get("id", n) < n:
            marked[added["id"]] = added.get("content") != unknown
    return WordMarks(marked, first, last)


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
    """Import a local Hugging Face tokenizer directory of any kind. Returns it, whether it
    lowercases and whether it strips accents, read from the directory rather than re-typed by
    the user. A WordPiece gets BERT's pipeline; another kind keeps its own (its post-processor
    too, where it has one)."""
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
        spec = json.loads(tok.to_str())
        if (spec.get("model") or {}).get("type") not in ("WordPiece", "BPE", "Unigram"):
            raise BertctlError(f"{tok_json}: a {(spec.get('model') or {}).get('type')} "
                               f"tokenizer (bertctl reads WordPiece, BPE and Unigram)")
        if kind_of(tok) != "wordpiece":
            check_special_tokens(tok, str(tok_json))
            tok.no_truncation()
            tok.no_padding()
            if tok.post_processor is None:
                tok.post_processor = post_processor(tok)
            lowercase = "Lowercase" in json.dumps(spec.get("normalizer")) or \
                bool(cfg.get("do_lower_case", False))
            return tok, lowercase, None
        norm = spec.get("normalizer") or {}
        lowercase = bool(norm.get("lowercase", cfg.get("do_lower_case", True)))
        strip = norm.get("strip_accents", cfg.get("strip_accents"))
        check_special_tokens(tok, str(tok_json))
        return _configure(tok, lowercase, strip), lowercase, strip
    vocab = directory / "vocab.txt"
    if vocab.is_file():
        lowercase = bool(cfg.get("do_lower_case", True))
        strip = cfg.get("strip_accents")
        return from_vocab(vocab, lowercase, strip), lowercase, strip
    raise BertctlError(f"{directory}: not a tokenizer directory "
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
    special_ids: dict[str, int]          # by role
    kind: str = "wordpiece"
    spelling: str = "bert"

    @classmethod
    def of(cls, tok: Tokenizer, lowercase: bool) -> "TokenizerInfo":
        return cls(tok.get_vocab_size(), lowercase, special_ids(tok), kind_of(tok),
                   spelling(tok) or "bert")

    def as_dict(self) -> dict:
        # A BERT WordPiece's record is what it was before the other kinds.
        other = {} if (self.kind, self.spelling) == ("wordpiece", "bert") else {
            "kind": self.kind, "special_tokens": SPELLINGS[self.spelling]}
        return {"vocab_size": self.vocab_size, "lowercase": self.lowercase,
                "special_ids": dict(self.special_ids), **other}


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
    """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json (and a
    WordPiece's vocab.txt, which transformers' slow BertTokenizer reads)."""
    try:
        tok.save(str(directory / "tokenizer.json"))
    except Exception as exc:  # noqa: BLE001 - tokenizers raises a bare Exception for I/O errors
        if is_disk_full(exc):
            raise DiskFull(directory / "tokenizer.json") from None
        raise
    names = special_tokens(tok)
    specials = {"unk_token": names[UNK], "sep_token": names[SEP], "pad_token": names[PAD],
                "cls_token": names[CLS], "mask_token": names[MASK]}
    if kind_of(tok) == "wordpiece":
        vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
        (directory / "vocab.txt").write_text("".join(t + "\n" for t, _ in vocab),
                                             encoding="utf-8")
        config = {"tokenizer_class": "BertTokenizer", "do_lower_case": lowercase,
                  "strip_accents": strip_accents, "tokenize_chinese_chars": True}
    else:   # transformers reads the pipeline from tokenizer.json itself
        config = {"tokenizer_class": "PreTrainedTokenizerFast"}
    if spelling(tok) == "roberta":   # one segment: no token_type_ids, as RoBERTa's tokenizers
        specials |= {"bos_token": names[CLS], "eos_token": names[SEP]}
        config["model_input_names"] = ["input_ids", "attention_mask"]
    config = {**config, "model_max_length": MODEL_MAX_LENGTH,
              "clean_up_tokenization_spaces": False, **specials}
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n",
                                                      encoding="utf-8")
    (directory / "special_tokens_map.json").write_text(json.dumps(specials, indent=2) + "\n",
                                                        encoding="utf-8")


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
