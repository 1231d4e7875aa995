"""ELECTRA's hyper-parameters as config.json names them: BERT's fields, the embeddings' own
width, and the multiple-choice summary transformers builds."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

from bertctl.errors import BertctlError
from bertctl.model.architectures import ACTIVATION_NAMES, encoder_flops
from bertctl.model.bert.config import BertConfig


@dataclass
class ElectraConfig(BertConfig):
    """The defaults are ELECTRA-base's discriminator (Clark et al., 2020)."""

    architecture = "electra"
    model_type: ClassVar[str] = "electra"

    embedding_size: int | None = None     # None: hidden_size (ELECTRA-small's is 128 of 256)
    summary_type: str = "first"
    summary_use_proj: bool = True
    summary_activation: str | None = "gelu"
    summary_last_dropout: float = 0.1

    def validate(self) -> None:
        super().validate()

        def bad(problem: str) -> BertctlError:
            return BertctlError(f"model config: {problem}")

        if self.embedding_size is not None and (isinstance(self.embedding_size, bool) or
                                                not isinstance(self.embedding_size, int)
                                                or self.embedding_size < 1):
            raise bad(f"embedding_size must be a positive integer, got {self.embedding_size!r}")
        if self.summary_type != "first" or self.summary_use_proj is not True:
            raise bad(f"summary_type {self.summary_type!r} with summary_use_proj "
                      f"{self.summary_use_proj!r}: bertctl's multiple-choice head reads the "
                      f"first token through a projection (ELECTRA's own)")
        if self.summary_activation not in (None, *ACTIVATION_NAMES):
            raise bad(f"summary_activation {self.summary_activation!r} is not supported")
        if not 0 <= self.summary_last_dropout < 1:
            raise bad(f"summary_last_dropout must be in [0, 1), got {self.summary_last_dropout}")

    @property
    def embedding_width(self) -> int:
        return self.embedding_size or self.hidden_size

    def matmul_flops(self, rows: int, seq_len: int, mlm_fraction: float = 0.15,
                     training: bool = True, pooler: bool = False) -> float:
        return encoder_flops(self, rows, seq_len, mlm_fraction, training, pooler,
                             embedding_width=self.embedding_width)

    def sized(self, preset: str) -> ElectraConfig:
        return replace(super().sized(preset), embedding_size=None)

    def to_hf_dict(self) -> dict[str, Any]:
        return {**super().to_hf_dict(), "embedding_size": self.embedding_width}

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any], source: str = "config.json") -> ElectraConfig:
        if isinstance(d, dict):
            if d.get("summary_proj_to_labels") or (d.get("summary_first_dropout") or 0) > 0:
                raise BertctlError(f"{source}: summary_proj_to_labels or summary_first_dropout "
                                   f"(a multiple-choice summary other than ELECTRA's) is not "
                                   f"supported")
            # transformers' ElectraConfig reads a missing embedding_size as 128
            d = {**d, "embedding_size": d.get("embedding_size", 128)}
            if d["embedding_size"] == d.get("hidden_size"):
                d["embedding_size"] = None
        return super().from_hf_dict(d, source)

