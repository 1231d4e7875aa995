"""ModernBERT's hyper-parameters under transformers' `ModernBertConfig` field names, and the size
presets (`PRESETS`): what config.json holds for a `model_type: modernbert` directory.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

from bertctl.errors import BertctlError
from bertctl.model.architectures import check_config, encoder_flops
from bertctl.model.config_base import ConfigBase

GLOBAL, LOCAL = "full_attention", "sliding_attention"   # transformers' layer_types values


@dataclass
class ModernBertConfig(ConfigBase):
    """The defaults are ModernBERT-base's shape (Warner et al., 2024) on BERT's vocabulary."""

    architecture = "modernbert"
    model_type: ClassVar[str] = "modernbert"
    FEED_FORWARD = 1.5   # its GeGLU's, as a multiple of the width
    KEPT_WHEN_SIZED = ("vocab_size", "max_position_embeddings", "pad_token_id", "cls_token_id",
                       "sep_token_id")

    vocab_size: int = 30522
    hidden_size: int = 768
    intermediate_size: int = 1152      # GeGLU: the input projection is twice this wide
    num_hidden_layers: int = 22
    num_attention_heads: int = 12
    hidden_activation: str = "gelu"
    # No position table (rotary): the longest input the model declares it reads.
    max_position_embeddings: int = 512
    initializer_range: float = 0.02
    initializer_cutoff_factor: float = 2.0
    norm_eps: float = 1e-5
    norm_bias: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    attention_dropout: float = 0.0
    embedding_dropout: float = 0.0
    mlp_dropout: float = 0.0
    # A global layer every third (the first is global); the others see `local_attention` tokens
    # around each position (half on each side).
    layer_types: list[str] = field(default_factory=list)
    global_attn_every_n_layers: int = 3
    local_attention: int = 128
    global_rope_theta: float = 160_000.0
    local_rope_theta: float = 10_000.0
    decoder_bias: bool = True
    classifier_pooling: str = "cls"
    classifier_dropout: float = 0.0
    classifier_bias: bool = False
    classifier_activation: str = "gelu"
    pad_token_id: int | None = 0
    cls_token_id: int | None = None
    sep_token_id: int | None = None

    def __post_init__(self) -> None:
        if not self.layer_types:
            n = self.global_attn_every_n_layers
            self.layer_types = [LOCAL if (i % n if n > 0 else 1) else GLOBAL
                                for i in range(self.num_hidden_layers)]
        self.validate()

    def validate(self) -> None:
        check_config(self, ("vocab_size", "hidden_size", "num_hidden_layers",
                            "num_attention_heads", "intermediate_size",
                            "max_position_embeddings", "local_attention"),
                     rates=("attention_dropout", "embedding_dropout", "mlp_dropout",
                            "classifier_dropout"),
                     activations=("hidden_activation", "classifier_activation"),
                     scales=("initializer_range", "initializer_cutoff_factor", "norm_eps",
                             "global_rope_theta", "local_rope_theta"),
                     flags=("norm_bias", "attention_bias", "mlp_bias", "decoder_bias",
                            "classifier_bias"))

        def bad(problem: str) -> BertctlError:
            return BertctlError(f"model config: {problem}")

        if self.local_attention < 2 or self.local_attention % 2:
            raise bad(f"local_attention must be an even window of 2 or more tokens (half on "
                      f"each side), got {self.local_attention}")
        if self.head_size % 2:
            raise bad(f"the head size {self.head_size} must be even (rotary positions rotate "
                      f"pairs)")
        if len(self.layer_types) != self.num_hidden_layers or \
                set(self.layer_types) - {GLOBAL, LOCAL}:
            raise bad(f"layer_types must give one of {GLOBAL!r}, {LOCAL!r} for each of the "
                      f"{self.num_hidden_layers} layers")
        if self.classifier_pooling not in ("cls", "mean"):
            raise bad(f"classifier_pooling {self.classifier_pooling!r} is not 'cls' or 'mean'")

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def matmul_flops(self, rows: int, seq_len: int, mlm_fraction: float = 0.15,
                     training: bool = True, pooler: bool = False) -> float:
        """BERT's count with GeGLU's two input projections, and a local layer's scores over
        its window (`local_attention` keys) once the row is longer."""
        keys = [seq_len if kind == GLOBAL else min(seq_len, self.local_attention)
                for kind in self.layer_types]
        return encoder_flops(self, rows, seq_len, mlm_fraction, training, pooler,
                             ffn_inputs=2, keys=keys)

    def with_layers(self, layers: list[int]) -> ModernBertConfig:
        """This config for a model of only `layers` of this one's (each keeps its attention)."""
        return replace(self, num_hidden_layers=len(layers),
                       layer_types=[self.layer_types[i] for i in layers])

    def with_special_ids(self, special_ids: dict[str, int]) -> ModernBertConfig:
        """This config naming the tokenizer's [CLS] and [SEP] where it names none (config.json's
        bos and eos tokens, as transformers' ModernBERT writes them)."""
        return replace(self, **{field: special_ids[token] for field, token in (
            ("cls_token_id", "[CLS]"), ("sep_token_id", "[SEP]"))
            if getattr(self, field) is None and special_ids.get(token) is not None})

    @property
    def half_window(self) -> int:
        """How far a local layer's token sees on each side (transformers' sliding_window)."""
        return self.local_attention // 2

    # What the shared code reads under BERT's names.
    @property
    def hidden_dropout_prob(self) -> float:
        return self.mlp_dropout

    # -- transformers' config.json -------------------------------------------------------------

    def to_hf_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)
             if f.name not in ("global_rope_theta", "local_rope_theta",
                               "global_attn_every_n_layers")}
        d["layer_types"] = list(self.layer_types)
        d["rope_parameters"] = {
            GLOBAL: {"rope_theta": self.global_rope_theta, "rope_type": "default"},
            LOCAL: {"rope_theta": self.local_rope_theta, "rope_type": "default"}}
        ids = {k: getattr(self, k) for k in ("cls_token_id", "sep_token_id")}
        # transformers' defaults are ModernBERT's own vocabulary's ids: say ours.
        return {"model_type": self.model_type, **d, "bos_token_id": ids["cls_token_id"],
                "eos_token_id": ids["sep_token_id"], "tie_word_embeddings": True,
                "sparse_prediction": False, "sparse_pred_ignore_index": -100,
                "deterministic_flash_attn": False}

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any], source: str = "config.json") -> ModernBertConfig:
        """From transformers' config.json (current `rope_parameters` and `layer_types`, or the
        older `global_rope_theta`/`global_attn_every_n_layers`); what bertctl does not
        implement is named, not ignored."""
        cls._check_file(d, source, ("vocab_size", "hidden_size", "num_hidden_layers",
                                    "num_attention_heads", "intermediate_size"))
        values = {k: v for k, v in d.items() if k in {f.name for f in fields(cls)}}
        rope = d.get("rope_parameters") or {}
        if not isinstance(rope, dict):
            raise BertctlError(f"{source}: rope_parameters must be an object")
        for kind, key in ((GLOBAL, "global_rope_theta"), (LOCAL, "local_rope_theta")):
            params = rope.get(kind) or {}
            if params.get("rope_type", "default") != "default":
                raise BertctlError(f"{source}: rope_parameters.{kind}.rope_type "
                                   f"{params['rope_type']!r} is not supported (only 'default')")
            if "rope_theta" in params:
                theta = params["rope_theta"]
                if isinstance(theta, bool) or not isinstance(theta, (int, float)):
                    raise BertctlError(f"{source}: rope_parameters.{kind}.rope_theta must be a "
                                       f"positive number, got {theta!r}")
                values[key] = float(theta)
        if d.get("rope_scaling"):
            raise BertctlError(f"{source}: rope_scaling is not supported")
        if d.get("sparse_prediction") not in (None, False, True) or \
                d.get("sparse_pred_ignore_index", -100) != -100:
            raise BertctlError(f"{source}: sparse_pred_ignore_index other than -100 is not "
                               f"supported")
        if not d.get("tie_word_embeddings", True):
            raise BertctlError(f"{source}: an untied decoder (tie_word_embeddings false) is not "
                               f"supported")
        if values.get("cls_token_id") is None and d.get("bos_token_id") is not None:
            values["cls_token_id"] = d["bos_token_id"]
        return cls._from_values(values, source)


# (layers, hidden, heads, intermediate). base and large are ModernBERT's released shapes; the
# smaller ones keep Google's widths and heads with ModernBERT's 1.5 x hidden GeGLU, and deepen
# to about the parameters of the BERT preset of the same name (a ModernBERT layer holds 8.5 H^2
# weights against BERT's 12 H^2): matched sizes when the two are compared.
PRESETS: dict[str, tuple[int, int, int, int]] = {
    "tiny": (3, 128, 2, 192),
    "mini": (6, 256, 4, 384),
    "small": (6, 512, 8, 768),
    "medium": (11, 512, 8, 768),
    "base": (22, 768, 12, 1152),
    "large": (28, 1024, 16, 2624),
}

ModernBertConfig.use_presets(PRESETS)
