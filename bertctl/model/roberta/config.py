"""RoBERTa's and XLM-RoBERTa's hyper-parameters as config.json names them: BERT's fields, one
token type, the specials' ids, and a position table that starts past the padding id."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from bertctl.errors import BertctlError
from bertctl.model.bert.config import BertConfig


@dataclass
class RobertaConfig(BertConfig):
    """The defaults are RoBERTa-base's (Liu et al., 2019) with its byte-level BPE vocabulary."""

    architecture = "roberta"
    model_type: ClassVar[str] = "roberta"

    vocab_size: int = 50265
    max_position_embeddings: int = 514
    type_vocab_size: int = 1
    layer_norm_eps: float = 1e-5
    pad_token_id: int | None = 1
    bos_token_id: int = 0
    eos_token_id: int = 2

    def validate(self) -> None:
        super().validate()
        if self.pad_token_id is None:
            raise BertctlError("model config: pad_token_id must be set (RoBERTa's positions "
                               "count from it)")
        if self.longest_input < 1:
            raise BertctlError(f"model config: max_position_embeddings "
                               f"{self.max_position_embeddings} leaves no position past the "
                               f"padding id {self.pad_token_id}")

    @property
    def longest_input(self) -> int:
        """The table's rows up to the padding id are never a real token's position."""
        return self.max_position_embeddings - self.pad_token_id - 1

    def with_special_ids(self, special_ids: dict[str, int]) -> RobertaConfig:
        """A new model takes the tokenizer's padding, start and end ids (the padding id
        places the positions)."""
        ids = {field: special_ids[role] for field, role in (
            ("pad_token_id", "[PAD]"), ("bos_token_id", "[CLS]"), ("eos_token_id", "[SEP]"))
            if special_ids.get(role) is not None}
        return replace(self, **ids)


@dataclass
class XLMRobertaConfig(RobertaConfig):
    """RoBERTa's shape on XLM-R's SentencePiece vocabulary (Conneau et al., 2019)."""

    architecture = "xlm-roberta"
    model_type: ClassVar[str] = "xlm-roberta"

    vocab_size: int = 250002

