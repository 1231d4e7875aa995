"""BERT's hyper-parameters as config.json names them (`BertConfig`), and Google's size presets.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any, ClassVar

from bertctl.errors import BertctlError
from bertctl.model.architectures import check_config, encoder_flops, preset_shape



@dataclass
class BertConfig:
    """Hyper-parameters under Hugging Face's field names, so config.json maps one to one.

    The defaults are BERT-Base with the uncased English vocabulary.
    """

    architecture = "bert"   # model.architectures
    model_type: ClassVar[str] = "bert"   # config.json's
    presets: ClassVar[dict[str, str]]   # set below from PRESETS: name -> "L/H/A"

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int | None = 0
    # HF's optional override of the dropout before sequence/token classifiers (None: hidden's).
    classifier_dropout: float | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise BertctlError for settings no BERT can be built from."""
        check_config(self, ("vocab_size", "hidden_size", "num_hidden_layers",
                            "num_attention_heads", "intermediate_size",
                            "max_position_embeddings", "type_vocab_size"),
                     rates=("hidden_dropout_prob", "attention_probs_dropout_prob",
                            "classifier_dropout"),
                     activations=("hidden_act",),
                     scales=("initializer_range", "layer_norm_eps"))

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def with_layers(self, layers: list[int]) -> BertConfig:
        """This config for a model of only `layers` of this one's."""
        return replace(self, num_hidden_layers=len(layers))

    def matmul_flops(self, rows: int, seq_len: int, mlm_fraction: float = 0.15,
                     training: bool = True, pooler: bool = False) -> float:
        return encoder_flops(self, rows, seq_len, mlm_fraction, training, pooler)

    def sized(self, preset: str) -> BertConfig:
        """A preset size that reads what this model reads (vocabulary, positions, segments)."""
        return type(self).from_preset(preset, vocab_size=self.vocab_size,
                                      max_position_embeddings=self.max_position_embeddings,
                                      type_vocab_size=self.type_vocab_size,
                                      pad_token_id=self.pad_token_id)

    def with_special_ids(self, special_ids: dict[str, int]) -> BertConfig:
        """BERT's config names no special token but the padding (checked against the data's)."""
        return self

    # -- Hugging Face config.json --------------------------------------------------------------

    def to_hf_dict(self) -> dict[str, Any]:
        """The config.json content transformers' BertConfig reads (without `architectures`)."""
        return {"model_type": self.model_type, **asdict(self), "position_embedding_type": "absolute",
                "tie_word_embeddings": True}

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any], source: str = "config.json"):
        """Build from a parsed HF config.json; unknown keys are ignored, known ones checked.

        The size fields must be present: HF would silently fall back to BERT-Base for a missing
        one, which then fails later with a confusing shape error.
        """
        if not isinstance(d, dict):
            raise BertctlError(f"{source}: expected a JSON object, got {type(d).__name__}")
        model_type = d.get("model_type", cls.model_type)
        if model_type != cls.model_type:
            raise BertctlError(f"{source}: model_type is {model_type!r}, not {cls.model_type!r}")
        missing = [k for k in ESSENTIAL_KEYS if k not in d]
        if missing:
            raise BertctlError(f"{source}: missing {', '.join(missing)}")
        # Variants this encoder does not implement must fail here, not load wrong weights quietly.
        if d.get("position_embedding_type", "absolute") != "absolute":
            raise BertctlError(f"{source}: position_embedding_type "
                               f"{d['position_embedding_type']!r} is not supported (only 'absolute')")
        if d.get("is_decoder") or d.get("add_cross_attention"):
            raise BertctlError(f"{source}: decoder/cross-attention BERT is not supported")
        known = {f.name for f in fields(cls)}
        try:
            return cls(**{k: v for k, v in d.items() if k in known})
        except BertctlError as exc:  # say which file holds the bad value
            raise BertctlError(str(exc).replace("model config:", f"{source}:", 1)) from None
        except TypeError as exc:  # e.g. a string where a number belongs
            raise BertctlError(f"{source}: {exc}") from None

    # -- size presets --------------------------------------------------------------------------

    @classmethod
    def from_preset(cls, name: str, *, num_hidden_layers: int | None = None,
                    hidden_size: int | None = None, num_attention_heads: int | None = None,
                    intermediate_size: int | None = None, **overrides: Any):
        """A preset from PRESETS with overrides (vocab_size, max_position_embeddings, ...).

        Overriding hidden_size without intermediate_size keeps the paper's 4H feed-forward.
        """
        layers, hidden, heads, inner = preset_shape(
            PRESETS, name, num_hidden_layers, hidden_size, num_attention_heads, intermediate_size)
        return cls(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                   intermediate_size=inner, **overrides)




# (layers, hidden, heads): Google's released sizes; the feed-forward is always 4 * hidden.
PRESETS: dict[str, tuple[int, int, int]] = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}

ESSENTIAL_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")

BertConfig.presets = {name: f"{layers}/{hidden}/{heads}"
                      for name, (layers, hidden, heads) in PRESETS.items()}
