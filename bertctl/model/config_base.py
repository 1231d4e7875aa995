"""What every architecture's config does alike: size presets, a config for fewer layers or
another size, the special ids a new model takes, its FLOPs, and a config built from
config.json's values with the file named in every error. Each architecture's config is a
dataclass of transformers' field names deriving from `ConfigBase`, and says only what is its
own (`architectures.ArchitectureConfig` is the interface)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar

from bertctl.errors import BertctlError
from bertctl.model.architectures import encoder_flops, preset_shape


class ConfigBase:
    architecture: ClassVar[str]
    model_type: ClassVar[str]
    # size name -> (layers, width, heads[, feed-forward]) and, for --model-size's help, "L/H/A"
    PRESETS: ClassVar[dict[str, tuple[int, ...]]]
    presets: ClassVar[dict[str, str]]
    # the feed-forward of a width given without one, as a multiple of it
    FEED_FORWARD: ClassVar[float] = 4.0
    # this architecture's names of BERT's shape fields (DistilBERT's n_layers, dim, ...)
    SHAPE_NAMES: ClassVar[dict[str, str]] = {}
    # what a preset size keeps of the model it resizes: what it reads
    KEPT_WHEN_SIZED: ClassVar[tuple[str, ...]] = ("vocab_size", "max_position_embeddings",
                                                  "pad_token_id")

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise BertctlError ("model config: ...") for settings no model can be built from."""
        raise NotImplementedError

    @classmethod
    def use_presets(cls, presets: dict[str, tuple[int, ...]]) -> None:
        cls.PRESETS = presets
        cls.presets = {name: "/".join(map(str, shape[:3])) for name, shape in presets.items()}

    @classmethod
    def _named(cls, **values: Any) -> dict[str, Any]:
        return {cls.SHAPE_NAMES.get(k, k): v for k, v in values.items()}

    @classmethod
    def from_preset(cls, name: str, *, num_hidden_layers: int | None = None,
                    hidden_size: int | None = None, num_attention_heads: int | None = None,
                    intermediate_size: int | None = None, **overrides: Any):
        """A preset with overrides (vocab_size, max_position_embeddings, ...); a width given
        without a feed-forward keeps the architecture's ratio (FEED_FORWARD)."""
        layers, hidden, heads, inner = preset_shape(
            cls.PRESETS, name, num_hidden_layers, hidden_size, num_attention_heads,
            intermediate_size, feed_forward=cls.FEED_FORWARD)
        return cls(**cls._named(num_hidden_layers=layers, hidden_size=hidden,
                                num_attention_heads=heads, intermediate_size=inner), **overrides)

    def with_layers(self, layers: list[int]):
        """This config for a model of only `layers` of this one's."""
        return replace(self, **self._named(num_hidden_layers=len(layers)))

    def sized(self, preset: str):
        """A preset size that reads what this model reads (KEPT_WHEN_SIZED)."""
        return type(self).from_preset(preset, **{k: getattr(self, k)
                                                 for k in self.KEPT_WHEN_SIZED})

    def with_special_ids(self, special_ids: dict[str, int]):
        """Most configs name no special token but the padding, checked against the data's."""
        return self

    def matmul_flops(self, rows: int, seq_len: int, mlm_fraction: float = 0.15,
                     training: bool = True, pooler: bool = False) -> float:
        return encoder_flops(self, rows, seq_len, mlm_fraction, training, pooler)

    @classmethod
    def _check_file(cls, d: Any, source: str, required: tuple[str, ...] = ()) -> None:
        """config.json's content, before it is read: a JSON object, of this model_type (none:
        an old file, taken as this one's), with the `required` size fields (transformers would
        fall back to its defaults for a missing one, and fail later on a shape)."""
        if not isinstance(d, dict):
            raise BertctlError(f"{source}: expected a JSON object, got {type(d).__name__}")
        if d.get("model_type", cls.model_type) != cls.model_type:
            raise BertctlError(f"{source}: model_type is {d.get('model_type')!r}, not "
                               f"{cls.model_type!r}")
        missing = [k for k in required if k not in d]
        if missing:
            raise BertctlError(f"{source}: missing {', '.join(missing)}")

    @classmethod
    def _from_values(cls, values: dict[str, Any], source: str):
        """The config of config.json's `values` (those this class has), an error naming
        `source`."""
        known = {f.name for f in fields(cls)}
        try:
            return cls(**{k: v for k, v in values.items() if k in known})
        except BertctlError as exc:
            raise BertctlError(str(exc).replace("model config:", f"{source}:", 1)) from None
        except TypeError as exc:   # a string where a number belongs
            raise BertctlError(f"{source}: {exc}") from None


@dataclass
class BertFields(ConfigBase):
    """BERT's shape and training fields under transformers' names (BertConfig's, which
    ELECTRA, RoBERTa and DeBERTa keep), BERT-Base's defaults: a config that has them derives
    from this and overrides the defaults that are not its own."""

    KEPT_WHEN_SIZED = ("vocab_size", "max_position_embeddings", "type_vocab_size",
                       "pad_token_id")

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
