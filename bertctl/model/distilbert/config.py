"""DistilBERT's hyper-parameters under transformers' `DistilBertConfig` names (dim, n_layers,
n_heads, hidden_dim, ...), readable under BERT's names too (the shared code's)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any, ClassVar

from bertctl.errors import BertctlError
from bertctl.model.architectures import check_config, encoder_flops, preset_shape

# BERT's name -> DistilBERT's, as transformers' attribute_map has them.
NAMES = {"hidden_size": "dim", "num_hidden_layers": "n_layers",
         "num_attention_heads": "n_heads", "intermediate_size": "hidden_dim"}


@dataclass
class DistilBertConfig:
    """The defaults are distilbert-base-uncased's: six of BERT-base's layers."""

    architecture = "distilbert"
    model_type: ClassVar[str] = "distilbert"
    presets: ClassVar[dict[str, str]]

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

    def __post_init__(self) -> None:
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

    def matmul_flops(self, rows: int, seq_len: int, mlm_fraction: float = 0.15,
                     training: bool = True, pooler: bool = False) -> float:
        return encoder_flops(self, rows, seq_len, mlm_fraction, training, pooler)

    def with_layers(self, layers: list[int]) -> DistilBertConfig:
        return replace(self, n_layers=len(layers))

    def sized(self, preset: str) -> DistilBertConfig:
        return DistilBertConfig.from_preset(
            preset, vocab_size=self.vocab_size,
            max_position_embeddings=self.max_position_embeddings, pad_token_id=self.pad_token_id)

    def with_special_ids(self, special_ids: dict[str, int]) -> DistilBertConfig:
        return self

    def to_hf_dict(self) -> dict[str, Any]:
        return {"model_type": self.model_type, **asdict(self), "tie_weights_": True}

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any], source: str = "config.json") -> DistilBertConfig:
        if not isinstance(d, dict):
            raise BertctlError(f"{source}: expected a JSON object, got {type(d).__name__}")
        if d.get("model_type", cls.model_type) != cls.model_type:
            raise BertctlError(f"{source}: model_type is {d.get('model_type')!r}, not "
                               f"{cls.model_type!r}")
        values = {NAMES.get(k, k): v for k, v in d.items()}
        missing = [k for k in ("vocab_size", "dim", "n_layers", "n_heads") if k not in values]
        if missing:
            raise BertctlError(f"{source}: missing {', '.join(missing)}")
        if d.get("tie_weights_") is False:
            raise BertctlError(f"{source}: an untied decoder (tie_weights_ false) is not "
                               f"supported")
        try:
            return cls(**{k: v for k, v in values.items() if k in {f.name for f in fields(cls)}})
        except BertctlError as exc:
            raise BertctlError(str(exc).replace("model config:", f"{source}:", 1)) from None
        except TypeError as exc:
            raise BertctlError(f"{source}: {exc}") from None

    @classmethod
    def from_preset(cls, name: str, *, num_hidden_layers: int | None = None,
                    hidden_size: int | None = None, num_attention_heads: int | None = None,
                    intermediate_size: int | None = None, **overrides: Any) -> DistilBertConfig:
        layers, hidden, heads, inner = preset_shape(
            PRESETS, name, num_hidden_layers, hidden_size, num_attention_heads, intermediate_size)
        return cls(n_layers=layers, dim=hidden, n_heads=heads, hidden_dim=inner, **overrides)


# (layers, hidden, heads): half of BERT's depth at its widths.
PRESETS: dict[str, tuple[int, int, int]] = {
    "tiny": (1, 128, 2),
    "mini": (2, 256, 4),
    "small": (2, 512, 8),
    "base": (6, 768, 12),
    "large": (12, 1024, 16),
}

DistilBertConfig.presets = {name: f"{layers}/{hidden}/{heads}"
                            for name, (layers, hidden, heads) in PRESETS.items()}
