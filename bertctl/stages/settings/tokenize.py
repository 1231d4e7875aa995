"""`bertctl tokenize`: the vocabulary's kind, spelling, size and normalisation."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from bertctl.settings import StageConfig, corpus_text_column, meta

TOKENIZER = "Tokenizer"


class TokenizeSettings(StageConfig):
    produces: ClassVar[str | None] = "tokenizer"
    model: Literal["wordpiece", "bpe", "byte-level-bpe", "unigram"] = Field(
        "wordpiece", description="The vocabulary's kind: BERT's WordPiece; BPE or Unigram "
        "over SentencePiece's word marker (XLM-R's and DeBERTa-v3's are Unigram); GPT-2's and "
        "RoBERTa's byte-level BPE (nothing is ever unknown).",
        json_schema_extra=meta(TOKENIZER, hashed_if_changed=True))
    special_tokens: Literal["bert", "roberta"] | None = Field(
        None, description="How the special tokens are spelled: BERT's [CLS] [SEP] [PAD] "
        "[MASK] [UNK] (bert, DeBERTa, ModernBERT, ELECTRA) or RoBERTa's <s> </s> <pad> <mask> "
        "<unk> (roberta, xlm-roberta); unset: bert for wordpiece, roberta for the others.",
        json_schema_extra=meta(TOKENIZER, hashed_if_changed=True))
    unicode: Literal["nfkc", "nfc", "nfd", "nfkd", "none"] | None = Field(
        None, description="The Unicode normal form text takes before a BPE or Unigram "
        "vocabulary reads it; unset: nfkc (SentencePiece's). WordPiece has BERT's own "
        "normaliser.", json_schema_extra=meta(TOKENIZER, hashed_if_changed=True))
    vocab_size: int = Field(30522, ge=1, description="Vocabulary size, special and [unused] "
                            "tokens included.", json_schema_extra=meta(TOKENIZER))
    cased: bool = Field(False, description="Keep case and accents (a cased model) instead of "
                        "lowercasing.", json_schema_extra=meta(TOKENIZER, flag="--cased/--uncased"))
    strip_accents: bool | None = Field(None, description="Strip accents; unset follows "
                                       "--uncased as Google's models do.",
                                       json_schema_extra=meta(TOKENIZER))
    min_frequency: int = Field(2, ge=1, description="Minimum count for a piece to be merged "
                               "into the vocabulary.", json_schema_extra=meta(TOKENIZER))
    limit_alphabet: int = Field(1000, ge=1, description="Most distinct characters kept in "
                                "the alphabet; rarer ones become [UNK].",
                                json_schema_extra=meta(TOKENIZER))
    unused_tokens: int = Field(99, ge=0, le=100000, description="Reserved [unusedN] slots for "
                               "adding domain words later (Google's layout: [UNK]=100 with 99).",
                               json_schema_extra=meta(TOKENIZER))
    text_column: str | None = corpus_text_column()
    add: int | None = Field(None, ge=1, le=1_000_000, description="With --extend: the number of "
                            "words to add as pieces (those that shorten the corpus's "
                            "tokenization most).",
                            json_schema_extra=meta(TOKENIZER, hashed_if_changed=True))
