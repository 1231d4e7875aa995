"""DeBERTa-v2's and -v3's hyper-parameters under transformers' `DebertaV2Config` field names
(config.json's `model_type: deberta-v2`), and the size presets."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

from bertctl.errors import BertctlError
from bertctl.model.architectures import check_config, encoder_flops
from bertctl.model.config_base import BertFields

ATTENTION_TYPES = ("c2p", "p2c")   # content-to-position and position-to-content


@dataclass
class DebertaV2Config(BertFields):
    """The defaults are DeBERTa-v3's (He et al., 2021): relative attention over 256 log
    buckets, both disentangled terms with the content projections shared, no absolute
    positions, no token types, its 128k SentencePiece vocabulary; the base size."""

    architecture = "deberta-v2"
    model_type: ClassVar[str] = "deberta-v2"

    vocab_size: int = 128100
    type_vocab_size: int = 0
    layer_norm_eps: float = 1e-7
    relative_attention: bool = True
    max_relative_positions: int = -1      # below 1: max_position_embeddings
    position_buckets: int = 256           # below 1: no buckets, one row per distance
    norm_rel_ebd: str = "layer_norm"
    share_att_key: bool = True
    pos_att_type: list[str] = field(default_factory=lambda: ["p2c", "c2p"])
    position_biased_input: bool = False
    embedding_size: int | None = None     # None: hidden_size
    pooler_hidden_size: int | None = None  # None: hidden_size
    pooler_dropout: float = 0.0
    pooler_hidden_act: str = "gelu"
    cls_dropout: float | None = None
    legacy: bool = True                   # the masked LM's head at cls.predictions
    pad_token_id: int | None = 0

    def validate(self) -> None:
        check_config(self, ("vocab_size", "hidden_size", "num_hidden_layers",
                            "num_attention_heads", "intermediate_size",
                            "max_position_embeddings"),
                     rates=("hidden_dropout_prob", "attention_probs_dropout_prob",
                            "pooler_dropout", "cls_dropout"),
                     activations=("hidden_act", "pooler_hidden_act"),
                     scales=("initializer_range", "layer_norm_eps"),
                     flags=("relative_attention", "share_att_key", "position_biased_input",
                            "legacy"))

        def bad(problem: str) -> BertctlError:
            return BertctlError(f"model config: {problem}")

        if not isinstance(self.pos_att_type, list) or set(self.pos_att_type) - set(ATTENTION_TYPES):
            raise bad(f"pos_att_type {self.pos_att_type!r}: bertctl implements "
                      f"{' and '.join(ATTENTION_TYPES)} (p2p is not)")
        for name in ("type_vocab_size", "max_relative_positions", "position_buckets"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise bad(f"{name} must be an integer, got {value!r}")
        if self.position_buckets > 0 and self.position_buckets < 2:
            raise bad(f"position_buckets {self.position_buckets} leaves no bucket on a side")
        if self.norm_rel_ebd not in ("layer_norm", "none"):
            raise bad(f"norm_rel_ebd {self.norm_rel_ebd!r} is not 'layer_norm' or 'none'")
        if self.pooler_hidden_size not in (None, self.hidden_size):
            raise bad(f"pooler_hidden_size {self.pooler_hidden_size} differs from hidden_size "
                      f"{self.hidden_size}")
        if not (self.relative_attention or self.position_biased_input):
            raise bad("neither relative_attention nor position_biased_input: the model would "
                      "not see where a token is")

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def relative_span(self) -> int:
        """How many relative distances each side of zero the table holds (its rows: twice)."""
        if self.position_buckets > 0:
            return self.position_buckets
        return self.max_relative_positions if self.max_relative_positions >= 1 else \
            self.max_position_embeddings

    @property
    def max_distance(self) -> int:
        """The distance the buckets grow logarithmically to (transformers'
        max_relative_positions after its default)."""
        return self.max_relative_positions if self.max_relative_positions >= 1 else \
            self.max_position_embeddings

    def matmul_flops(self, rows: int, seq_len: int, mlm_fraction: float = 0.15,
                     training: bool = True, pooler: bool = False) -> float:
        """BERT's count, plus the disentangled attention: each of c2p and p2c scores every
        token against the 2 x relative_span distances, whose projections run once a batch."""
        H, L = self.hidden_size, self.num_hidden_layers
        kinds = sum(kind in self.pos_att_type for kind in ("c2p", "p2c")) \
            if self.relative_attention else 0
        distances = 2 * self.relative_span
        return encoder_flops(self, rows, seq_len, mlm_fraction, training, pooler,
                             embedding_width=self.embedding_size,
                             per_token=L * kinds * distances * H,
                             per_batch=L * kinds * distances * H * H)

    # -- transformers' config.json -------------------------------------------------------------

    def to_hf_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if v is not None}
        return {"model_type": self.model_type, **d, "tie_word_embeddings": True}

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any], source: str = "config.json") -> DebertaV2Config:
        """From transformers' config.json; what bertctl does not implement (a convolution
        after the first layer, heads of another width, p2p attention) is named, not ignored."""
        cls._check_file(d, source, ("vocab_size", "hidden_size", "num_hidden_layers",
                                    "num_attention_heads"))
        if (d.get("conv_kernel_size") or 0) > 0:
            raise BertctlError(f"{source}: conv_kernel_size {d['conv_kernel_size']} (DeBERTa-v2 "
                               f"xlarge's convolution after the first layer) is not supported")
        head = d.get("attention_head_size")
        if head is not None and head * d["num_attention_heads"] != d["hidden_size"]:
            raise BertctlError(f"{source}: attention_head_size {head} times "
                               f"{d['num_attention_heads']} heads is not hidden_size "
                               f"{d['hidden_size']}: not supported")
        values = {k: v for k, v in d.items() if k in {f.name for f in fields(cls)}}
        # transformers' own defaults where the file says nothing (its config class's, not v3's)
        for key, default in (("relative_attention", False), ("position_biased_input", True),
                             ("pos_att_type", None), ("position_buckets", -1),
                             ("norm_rel_ebd", "none"), ("share_att_key", False)):
            values.setdefault(key, default)
        if isinstance(values["pos_att_type"], str):   # old files: "p2c|c2p"
            values["pos_att_type"] = [t.strip() for t in values["pos_att_type"].split("|")]
        values["pos_att_type"] = values["pos_att_type"] or []
        values["norm_rel_ebd"] = "layer_norm" if "layer_norm" in str(values["norm_rel_ebd"]) \
            else "none"
        if values.get("embedding_size") == d["hidden_size"]:
            values["embedding_size"] = None
        return cls._from_values(values, source)


# (layers, hidden, heads): BERT's sizes and DeBERTa-v3's xsmall and small.
PRESETS: dict[str, tuple[int, int, int]] = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "xsmall": (12, 384, 6),
    "small": (6, 768, 12),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}

DebertaV2Config.use_presets(PRESETS)
