"""BERT's hyper-parameters as config.json names them (`BertConfig`), and Google's size presets.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from bertctl.errors import BertctlError
from bertctl.model.architectures import check_config
from bertctl.model.config_base import BertFields


@dataclass
class BertConfig(BertFields):
    """Hyper-parameters under Hugging Face's field names, so config.json maps one to one.

    The defaults are BERT-Base with the uncased English vocabulary.
    """

    architecture = "bert"   # model.architectures
    model_type: ClassVar[str] = "bert"   # config.json's

    pad_token_id: int | None = 0
    # HF's optional override of the dropout before sequence/token classifiers (None: hidden's).
    classifier_dropout: float | None = None

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
        cls._check_file(d, source, ESSENTIAL_KEYS)
        # Variants this encoder does not implement must fail here, not load wrong weights quietly.
        if d.get("position_embedding_type", "absolute") != "absolute":
            raise BertctlError(f"{source}: position_embedding_type "
                               f"{d['position_embedding_type']!r} is not supported (only 'absolute')")
        if d.get("is_decoder") or d.get("add_cross_attention"):
            raise BertctlError(f"{source}: decoder/cross-attention BERT is not supported")
        return cls._from_values(d, source)


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

BertConfig.use_presets(PRESETS)
