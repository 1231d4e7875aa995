"""Reading and writing tokenizers of every kind (WordPiece, BPE, byte-level BPE, Unigram):
Google's vocab.txt, a Hugging Face directory, bertctl's own. The saved directory is what
transformers' `AutoTokenizer.from_pretrained` loads, so a bertctl tokenizer is a Hugging Face
tokenizer with no conversion."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

from bertctl.data.tokenizer.specials import (BERT, CLS, MASK, PAD, SEP, SPELLINGS, UNK,
                                             check_special_tokens, post_processor, special_ids,
                                             special_tokens, spelling)
from bertctl.errors import BertctlError, DiskFull, is_disk_full

MODEL_MAX_LENGTH = 512


def bert_normalizer(tok: Tokenizer, lowercase: bool, strip_accents: bool | None) -> None:
    """BERT's normaliser (cleaning, CJK characters split, lowercasing and accents as asked)
    and pre-tokenizer."""
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=strip_accents, lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()


def wordpiece_pipeline(tok: Tokenizer, lowercase: bool, strip_accents: bool | None) -> Tokenizer:
    """The full BERT pipeline around a WordPiece model that holds the special tokens.

    Truncation and padding are switched off: an imported tokenizer.json may carry its own, and
    each stage sets the lengths it needs explicitly.
    """
    bert_normalizer(tok, lowercase, strip_accents)
    tok.no_truncation()
    tok.no_padding()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.post_processor = post_processor(tok)
    return tok


def kind_of(tok: Tokenizer) -> str:
    """The kind of a tokenizer's model (a BPE is byte-level when its pre-tokenizer is)."""
    spec = json.loads(tok.to_str())
    model = (spec.get("model") or {}).get("type")
    if model == "BPE":
        return "byte-level-bpe" if "ByteLevel" in json.dumps(spec.get("pre_tokenizer")) else "bpe"
    return {"WordPiece": "wordpiece", "Unigram": "unigram"}.get(model, str(model).lower())


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
    return wordpiece_pipeline(tok, lowercase, strip_accents)


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
        return wordpiece_pipeline(tok, lowercase, strip), lowercase, strip
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
                   (spelling(tok) or BERT).name)

    def as_dict(self) -> dict:
        # A BERT WordPiece's record is what it was before the other kinds.
        other = {} if (self.kind, self.spelling) == ("wordpiece", "bert") else {
            "kind": self.kind, "special_tokens": SPELLINGS[self.spelling].tokens}
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
    if not (spelling(tok) or BERT).segments:   # no token_type_ids, as RoBERTa's tokenizers
        specials |= {"bos_token": names[CLS], "eos_token": names[SEP]}
        config["model_input_names"] = ["input_ids", "attention_mask"]
    config = {**config, "model_max_length": MODEL_MAX_LENGTH,
              "clean_up_tokenization_spaces": False, **specials}
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n",
                                                      encoding="utf-8")
    (directory / "special_tokens_map.json").write_text(json.dumps(specials, indent=2) + "\n",
                                                        encoding="utf-8")
