"""The special tokens: their roles, named by BERT's spelling ([PAD], [UNK], [CLS], [SEP],
[MASK]: what manifests key their ids by), and the `Spelling`s vocabularies write them in
(BERT's, or RoBERTa's <pad>, <unk>, <s>, </s>, <mask>): which tokens, in which id order a new
vocabulary opens with, and how a pair of texts is framed."""

from __future__ import annotations

from dataclasses import dataclass

from tokenizers import Tokenizer, processors

from bertctl.errors import BertctlError

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)   # the roles
# Google's vocabularies put 99 [unused] slots between [PAD] and [UNK] (so [UNK]=100, [CLS]=101,
# [SEP]=102, [MASK]=103) and the rest after [MASK]; we keep that layout so ids match Google's.
UNUSED_BEFORE_UNK = 99


@dataclass(frozen=True, eq=False)
class Spelling:
    """How a family of vocabularies spells the roles (`name`: transformers' name for it, the one
    `Architecture.spelling` gives)."""

    name: str
    tokens: dict[str, str]        # role -> token
    order: tuple[str, ...]        # the roles in the id order a new subword vocabulary opens with
    separators: int               # separators between a pair's two texts
    segments: bool                # whether a pair's second text is segment 1 (one separator)
    trained_by: str               # the `bertctl tokenize` flag that trains a vocabulary of it

    def words(self) -> str:
        return " ".join(self.tokens.values())


BERT = Spelling("bert", dict(zip(SPECIAL_TOKENS, SPECIAL_TOKENS)), SPECIAL_TOKENS,
                separators=1, segments=True, trained_by="--special-tokens bert")
# RoBERTa's order: <s> 0, <pad> 1, </s> 2, <unk> 3 (its padding id places its positions); its
# pair template doubles the separator (`<s> A </s></s> B </s>`) in one segment.
ROBERTA = Spelling("roberta", dict(zip(SPECIAL_TOKENS, ("<pad>", "<unk>", "<s>", "</s>", "<mask>"))),
                   (CLS, PAD, SEP, UNK, MASK), separators=2, segments=False,
                   trained_by="--model byte-level-bpe")
SPELLINGS = {s.name: s for s in (BERT, ROBERTA)}


def reserved_layout(unused_tokens: int) -> list[str]:
    """The special and [unused] tokens, in id order, that open a WordPiece vocabulary."""
    unused = [f"[unused{i}]" for i in range(unused_tokens)]
    head = min(unused_tokens, UNUSED_BEFORE_UNK)
    return [PAD, *unused[:head], UNK, CLS, SEP, MASK, *unused[head:]]


def spelling(tok: Tokenizer) -> Spelling | None:
    """The spelling a vocabulary has whole (None: neither)."""
    for found in SPELLINGS.values():
        if all(tok.token_to_id(t) is not None for t in found.tokens.values()):
            return found
    return None


def spelling_for(kind: str, asked: str | None) -> Spelling:
    """The spelling a new vocabulary of `kind` takes: the one asked, else BERT's for WordPiece
    and RoBERTa's for the others. WordPiece has only BERT's ([unused] slots sit among them)."""
    name = asked or ("bert" if kind == "wordpiece" else "roberta")
    if kind == "wordpiece" and name != BERT.name:
        raise BertctlError(f"--special-tokens {name}: a WordPiece vocabulary spells them "
                           f"BERT's way (train --model bpe, byte-level-bpe or unigram for "
                           f"RoBERTa's)")
    return SPELLINGS[name]


def special_tokens(tok: Tokenizer) -> dict[str, str]:
    """role -> the vocabulary's token for it (BERT's spelling when it has neither whole)."""
    return (spelling(tok) or BERT).tokens


def special_id(tok: Tokenizer, role: str) -> int | None:
    """The id of a role's token ([CLS]: RoBERTa's <s>), None where the vocabulary lacks it."""
    return tok.token_to_id(special_tokens(tok)[role])


def special_ids(tok: Tokenizer) -> dict[str, int | None]:
    return {role: special_id(tok, role) for role in SPECIAL_TOKENS}


def pair_separators(tok: Tokenizer) -> int:
    """Separators between a pair's two texts, as its tokenizers' pair template writes them."""
    return (spelling(tok) or BERT).separators


def check_special_tokens(tok: Tokenizer, where: str) -> None:
    if spelling(tok) is None:
        missing = [t for t in SPECIAL_TOKENS if tok.token_to_id(t) is None]
        raise BertctlError(f"{where}: vocabulary lacks the special token(s) "
                           f"{', '.join(missing)} (nor has RoBERTa's "
                           f"{', '.join(ROBERTA.tokens.values())})")


def post_processor(tok: Tokenizer) -> processors.TemplateProcessing:
    """[CLS] A [SEP] (B [SEP], segment 1) in BERT's spelling; <s> A </s> (</s> B </s>, one
    segment) in RoBERTa's."""
    spelled = spelling(tok) or BERT
    cls, sep = spelled.tokens[CLS], spelled.tokens[SEP]
    seps = " ".join([sep] * spelled.separators)
    pair = (f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1" if spelled.segments
            else f"{cls} $A {seps} $B {sep}")
    return processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=pair,
        special_tokens=[(cls, tok.token_to_id(cls)), (sep, tok.token_to_id(sep))])
