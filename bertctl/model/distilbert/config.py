"""DistilBERT's hyper-parameters under transformers' `DistilBertConfig` names (dim, n_layers,
n_heads, hidden_dim, ...), readable under BERT's names too (the shared code's)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from bertctl.errors import BertctlError
from bertctl.model.architectures import check_config
from bertctl.model.config_base import ConfigBase

# BERT's name -> DistilBERT's, as transformers' attribute_map has them.
NAMES = {"hidden_size": "dim", "num_hidden_layers": "n_layers",
         "num_attention_heads": "n_heads", "intermediate_size": "hidden_dim"}


@dataclass
class DistilBertConfig(ConfigBase):
    """The defaults are distilbert-base-uncased's: six of BERT-base's layers."""

    architecture = "distilbert"
    model_type: ClassVar[str] = "distilbert"
    SHAPE_NAMES = NAMES

    vocab_size: int = 30522
    dim: int = 768
    n_layers: int = 6
    n_heads: int = 12
    hidden_dim: int = 3072
    activation: str = "gelu"
    dropout: float = 0.1
    attention_dropout: float = 0.1
    max_position_embeddings: int = 512
    sinusoidal_pos_embds: bool = False
    initializer_range: float = 0.02
    qa_dropout: float = 0.1
    seq_classif_dropout: float = 0.2
    pad_token_id: int | None = 0

    def validate(self) -> None:
        check_config(self, ("vocab_size", "dim", "n_layers", "n_heads", "hidden_dim",
                            "max_position_embeddings"),
                     rates=("dropout", "attention_dropout", "qa_dropout", "seq_classif_dropout"),
                     activations=("activation",), scales=("initializer_range",),
                     flags=("sinusoidal_pos_embds",))

    # What the shared code reads under BERT's names.
    hidden_size = property(lambda self: self.dim)
    num_hidden_layers = property(lambda self: self.n_layers)
    num_attention_heads = property(lambda self: self.n_heads)
    intermediate_size = property(lambda self: self.hidden_dim)
    hidden_dropout_prob = property(lambda self: self.dropout)
    layer_norm_eps = 1e-12   # DistilBERT's LayerNorms all have it

    def to_hf_dict(self) -> dict[str, Any]:
        return {"model_type": self.model_type, **asdict(self), "tie_weights_": True}

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any], source: str = "config.json") -> DistilBertConfig:
        cls._check_file(d, source)
        values = {NAMES.get(k, k): v for k, v in d.items()}
        cls._check_file(values, source, ("vocab_size", "dim", "n_layers", "n_heads"))
        if d.get("tie_weights_") is False:
            raise BertctlError(f"{source}: an untied decoder (tie_weights_ false) is not "
                               f"supported")
        return cls._from_values(values, source)


# (layers, hidden, heads): half of BERT's depth at its widths.
PRESETS: dict[str, tuple[int, int, int]] = {
    "tiny": (1, 128, 2),
    "mini": (2, 256, 4),
    "small": (2, 512, 8),
    "base": (6, 768, 12),
    "large": (12, 1024, 16),
}

DistilBertConfig.use_presets(PRESETS)
