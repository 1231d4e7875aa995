"""Where words start and end in a vocabulary's pieces, for every kind (WordPiece's ##,
SentencePiece's ▁, GPT-2's byte-level Ġ): what whole-word masking groups pieces by
(data/pretraining/masking.py). All per-piece work runs once per vocabulary, in numpy."""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass

import numpy as np
from tokenizers import Tokenizer


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
    tests/data/test_tokenizer_kinds.py holds it to the pre-tokenizer's own word ids on real text."""

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
