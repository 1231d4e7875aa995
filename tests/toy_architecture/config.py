"""The toy's config: the fields it has, its checks and config.json's reading and writing.
Presets, other sizes, fewer layers and config.json's shared checks are `ConfigBase`'s."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar

from bertctl.model import architectures
from bertctl.model.config_base import ConfigBase


@dataclass
class ToyConfig(ConfigBase):
    architecture: ClassVar[str] = "toy"
    model_type: ClassVar[str] = "toy"
    FEED_FORWARD: ClassVar[float] = 2.0

    vocab_size: int = 100
    hidden_size: int = 32
    num_hidden_layers: int = 1
    num_attention_heads: int = 2
    intermediate_size: int = 64
    max_position_embeddings: int = 128
    pad_token_id: int | None = 0
    dropout: float = 0.1

    def validate(self) -> None:
        architectures.check_config(self, ("vocab_size", "hidden_size", "num_hidden_layers",
                                          "num_attention_heads", "intermediate_size",
                                          "max_position_embeddings"),
                                   rates=("dropout",), activations=())

    @classmethod
    def from_hf_dict(cls, d, source="config.json"):
        cls._check_file(d, source, required=("vocab_size", "hidden_size"))
        return cls._from_values(d, source)

    def to_hf_dict(self):
        return {"model_type": self.model_type, **asdict(self)}

    def matmul_flops(self, rows, seq_len, mlm_fraction=0.15, training=True, pooler=False):
        # a layer: qkv 3h², out h², the MLP 2hi, scores and mixing; the tied decoder with no
        # transform before it (BERT's form, `encoder_flops`, has one)
        h, per_row = self.hidden_size, (self.hidden_size * 2 if pooler else 0.0)
        per_token = (self.num_hidden_layers * (4 * h * h + 2 * h * self.intermediate_size
                                               + 2 * seq_len * h)
                     + mlm_fraction * h * self.vocab_size)
        return architectures.batch_flops(rows, seq_len, per_token, per_row, training=training)


ToyConfig.use_presets({"pico": (1, 32, 2), "nano": (2, 48, 4)})
