"""Model architectures as plug-ins, declared as task families and objectives are: a package
that registers an `Architecture` (its config class, which knows its size presets, and its model
class for each role: the bare encoder, the pretraining heads, the fine-tuning heads), imported in
bertctl/model/__init__.py.

The rest of bertctl asks for a role ("sequence_classification") and gets the class of the
architecture at hand: config.json's `model_type` says which for a saved model, `pretrain
--architecture` for a new one; the flag's choices and `--model-size`'s come from here. What an
architecture provides is written below as Protocols (`ArchitectureConfig`, `Encoder`; its
headed models are composed.Composed, an encoder and a head), which tests/test_architecture.py checks
of every registered one and tests/model/test_architecture_plugin.py proves with a toy architecture.

Declaring one imports no torch (`bertctl pretrain --help` reads the names and sizes): the model
classes may be given as "module:Class" strings, imported when a model is built.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from bertctl.errors import BertctlError
from bertctl.registry import Registry

if TYPE_CHECKING:   # (torch: not at import)
    from bertctl.model.attention import AttentionPolicy

# What an architecture's own model classes are for. The objectives train "pretraining",
# "masked_lm" or "electra"; the task families whose heads are transformers classes fine-tune one
# of the last four; "encoder" is the bare encoder (embed, export). A family with a head of its
# own registers it (`register_head`: the retrieval family's "embedding") for every architecture.
ROLES = ("encoder", "pretraining", "masked_lm", "electra", "sequence_classification",
         "multiple_choice", "question_answering", "token_classification")


# The class-name suffix transformers gives each role's model (BertForMaskedLM, ...); the
# model class of a role is the encoder class's prefix and it (config.json's `architectures`).
SUFFIXES = {"encoder": "Model", "pretraining": "ForPreTraining", "masked_lm": "ForMaskedLM",
            "electra": "ForElectraPreTraining",
            "sequence_classification": "ForSequenceClassification",
            "multiple_choice": "ForMultipleChoice",
            "question_answering": "ForQuestionAnswering",
            "token_classification": "ForTokenClassification"}


def heads_named(module: str, prefix: str, *, pretraining: bool = False, heads: str | None = None,
                **other: str) -> dict[str, str]:
    """An architecture's `heads` as its modeling `module` names them: the encoder class
    `prefix` + "Model", and each role's Head class, the `heads` prefix (default `prefix`), the
    role's name and "Head" (BertMaskedLMHead, BertSequenceClassificationHead): the masked LM
    (and the pretraining heads when it has them) and the four fine-tuning roles. `other`
    roles name their Head in full ("module:Class")."""
    heads = heads or prefix
    named = {role: f"{module}:{heads}{suffix.removeprefix('For')}Head"
             for role, suffix in SUFFIXES.items()
             if role not in ("encoder", "electra") and (role != "pretraining" or pretraining)}
    named.update(encoder=f"{module}:{prefix}Model", **other)
    return {role: named[role] for role in ROLES if role in named}


@runtime_checkable
class ArchitectureConfig(Protocol):
    """An architecture's config: config.json's fields under transformers' names, checked when
    built (BertctlError "model config: ..."), and these."""

    architecture: ClassVar[str]          # the registered name
    presets: ClassVar[dict[str, str]]    # size name -> what it is, for --model-size's help
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    max_position_embeddings: int         # config.json's (`longest_input` below reads it)
    pad_token_id: int | None

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> ArchitectureConfig:
        """A size preset; overrides: num_hidden_layers, hidden_size, num_attention_heads,
        intermediate_size (None: the preset's), vocab_size, max_position_embeddings, ..."""

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any], source: str = "config.json"
                     ) -> ArchitectureConfig: ...

    def to_hf_dict(self) -> dict[str, Any]:
        """config.json (with model_type; without `architectures`, which the head adds)."""

    def with_layers(self, layers: list[int]) -> ArchitectureConfig:
        """This config for a model of only `layers` of this one's (distillation's students)."""

    def sized(self, preset: str) -> ArchitectureConfig:
        """A preset size that reads what this model reads (vocabulary, positions)."""

    def with_special_ids(self, special_ids: dict[str, int]) -> ArchitectureConfig:
        """This config naming the tokenizer's special tokens ({"[CLS]": 2, ...}) where the
        architecture's config.json names them (ModernBERT's bos and eos) and it names none."""

    def matmul_flops(self, rows: int, seq_len: int, mlm_fraction: float = 0.15,
                     training: bool = True, pooler: bool = False) -> float:
        """The model FLOPs of a batch of `rows` x `seq_len` tokens (`batch_flops`): the
        encoder's matmuls, the masked-LM head at `mlm_fraction` of the positions (0: the bare
        encoder), and with `pooler` a pooled two-way head once a row (BERT's next-sentence
        prediction). The work the task needs, which model-FLOPs utilisation divides."""


@runtime_checkable
class Encoder(Protocol):
    """The bare encoder (role "encoder"; headed models hold one at `encoder_name`)."""

    config: ArchitectureConfig
    # Set by the training loop (--gradient-checkpointing): recompute each layer in backward.
    gradient_checkpointing: bool
    # How its layers compute attention (model/attention.py), one object they share; the
    # training loop sets its mode (--attention) and records the choices auto made.
    attention_policy: AttentionPolicy

    def compile_layers(self, on: bool = True) -> None:
        """torch.compile each layer (--compile); `on` False: eager again."""

    def hidden_state_modules(self) -> list[Any]:
        """The modules whose outputs are the hidden states 0 (the embeddings) to L (the
        training loop's layer-wise learning rates)."""

    def forward(self, input_ids, token_type_ids=None, attention_mask=None,
                output_hidden_states: bool = False, position_ids=None,
                num_layers: int | None = None, **kwargs) -> dict[str, Any]:
        """{"last_hidden_state": (B, T, H), "hidden_states": per layer when asked, ...}.
        `num_layers`: run only the first that many layers (embed and the frozen-encoder
        heads read no state above the highest they use); hidden_states then ends there."""


@dataclass(frozen=True)
class Architecture:
    name: str
    model_type: str                       # config.json's
    config_class: type                    # an ArchitectureConfig
    heads: dict[str, Any]                 # role -> model class, or "module:Class"
    # Where its headed models keep the encoder (transformers' base_model_prefix).
    encoder_name: str
    # The first names of a bare encoder's keys (a checkpoint saved without a head), which a
    # headed model holds under its encoder's name.
    bare_prefixes: tuple[str, ...]
    # For --architecture's help: what it is, in a few words.
    description: str = ""
    # Checkpoint entries that are not parameters and need no report (tied decoders, buffers).
    ignored_keys: tuple[str, ...] = ()
    # onnxruntime's transformer optimizer's model_type for its fused operators (export
    # --optimize); None: it has no fusions for this graph (onnxruntime's own graph
    # optimizations still run when a session loads it).
    onnx_fusions: str | None = None
    # Said when an input is longer than the model reads (after the refusal).
    positions_note: str = ""
    # RoBERTa's positions count from the padding id + 1: its table has that many rows more
    # than the longest input it reads.
    positions_past_padding: bool = False
    # The registered architecture whose blocks this one's package builds on (RoBERTa on
    # BERT's): the one other architecture package it may import.
    builds_on: str | None = None
    # How the special tokens of the vocabularies it reads are spelled (data/tokenizer/specials.py's
    # SPELLINGS): a new model is refused a vocabulary spelled otherwise.
    spelling: str = "bert"
    # Positions without a learned table (rotary): max_position_embeddings only declares the
    # longest input, so a model continued on longer rows may raise it (context extension).
    position_table: bool = True
    # The config field --rope-theta sets (the rotary base of the layers that see the whole
    # input); None: the architecture has no rotary positions.
    rope_base: str | None = None
    # config.json keys only this architecture's config has: a file without model_type that
    # holds one is this architecture's with its model_type lost, not an old BERT file.
    own_config_keys: tuple[str, ...] = ()
    # The linear layers finetune --lora-rank adapts unless --lora-targets names others: the
    # attention's query and value projections, as the LoRA paper's (ModernBERT: its fused qkv).
    lora_targets: tuple[str, ...] = ("query", "value")

    def roles(self) -> list[str]:
        """Every role it builds a model of: its own classes' and the registered heads'."""
        return [*self.heads, *(r for r in HEADS if r not in self.heads)]

    def head(self, role: str, where: str = "model") -> type:
        """The model class of `role`: the encoder's, or the encoder and the role's Head (the
        architecture's own, else a family's registered one), composed
        (bertctl/model/composed.py)."""
        if role == "encoder":
            return _imported(self.heads["encoder"])
        if role in self.heads:
            head = _imported(self.heads[role])
        elif role in HEADS:
            head = _imported(HEADS[role].head)
        else:
            raise BertctlError(f"{where}: the {self.name} architecture has no "
                               f"{role.replace('_', ' ')} model")
        from bertctl.model.composed import composed_class   # (torch: not at import)

        return composed_class(self.head_name(role), self.head("encoder"), self.encoder_name,
                              head, f"The {self.name} encoder with the "
                                    f"{role.replace('_', ' ')} head")

    def head_name(self, role: str) -> str:
        """The class name of a role's model (config.json's `architectures`), imported or not:
        the encoder class's prefix and the role's suffix (a family's head's own)."""
        found = self.heads["encoder"]
        encoder = found.partition(":")[2] if isinstance(found, str) else found.__name__
        if role == "encoder":
            return encoder
        suffix = SUFFIXES[role] if role in self.heads else HEADS[role].suffix
        return encoder.removesuffix("Model") + suffix

    def config_from_hf(self, hf: dict[str, Any], source: str):
        return self.config_class.from_hf_dict(hf, source=source)

    def longest_input(self, hf: dict[str, Any], default: int = 512) -> int:
        """The most tokens an input may hold, read from a parsed config.json."""
        table = int(hf.get("max_position_embeddings", default))
        if self.positions_past_padding:
            return table - int(hf.get("pad_token_id") or 0) - 1
        return table


def _imported(found: Any) -> type:
    if isinstance(found, str):
        module, _, name = found.partition(":")
        found = getattr(importlib.import_module(module), name)
    return found


ARCHITECTURES: Registry[Architecture] = Registry("architecture")
register = ARCHITECTURES.register


@dataclass(frozen=True)
class HeadSpec:
    """A task family's own head (a bertctl.model.composed.Head), paired with any
    architecture's encoder."""

    name: str       # its role: what `build`, `load_model` and a family's `head` name
    suffix: str     # the model class's name after the encoder's prefix: "ForEmbedding"
    head: Any       # the Head class, or "module:Class" (imported when a model is built)


HEADS: Registry[HeadSpec] = Registry("model head")
register_head = HEADS.register


def of_config(hf: dict[str, Any], source: str = "config.json") -> Architecture:
    """The architecture of a parsed config.json (by model_type; none: BERT, as old files)."""
    if isinstance(hf, dict) and "model_type" not in hf:
        other = [k for a in ARCHITECTURES.values() for k in a.own_config_keys if k in hf]
        if other:
            raise BertctlError(f"{source}: no model_type, and keys BERT does not have "
                               f"({', '.join(other)}): add \"model_type\" (one of "
                               f"{', '.join(a.model_type for a in ARCHITECTURES.values())})")
    model_type = hf.get("model_type", "bert") if isinstance(hf, dict) else "bert"
    for arch in ARCHITECTURES.values():
        if arch.model_type == model_type:
            return arch
    known = ", ".join(a.model_type for a in ARCHITECTURES.values())
    raise BertctlError(f"{source}: model_type is {model_type!r}; bertctl reads {known}")


def batch_flops(rows: int, seq_len: int, per_token: float, per_row: float = 0.0,
                per_batch: float = 0.0, training: bool = True) -> float:
    """A batch's FLOPs from a model's multiply-adds per token, per row and per batch: two FLOPs
    a multiply-add, and a training step's backward twice its forward (PaLM's convention for
    model-FLOPs utilisation)."""
    forward = 2 * (rows * seq_len * per_token + rows * per_row + per_batch)
    return forward * (3 if training else 1)


def encoder_flops(config, rows: int, seq_len: int, mlm_fraction: float, training: bool,
                  pooler: bool, *, ffn_inputs: int = 1, keys: list[int] | None = None,
                  embedding_width: int | None = None, per_token: float = 0.0,
                  per_batch: float = 0.0) -> float:
    """`ArchitectureConfig.matmul_flops` of an encoder of BERT's form. Each layer: four
    hidden x hidden attention projections, a feed-forward of `ffn_inputs` input projections
    (two where gated) and one output projection, and attention scores and mixing over `keys`
    positions (one count a layer; default the whole row: dense attention whatever the mask, as
    PaLM counts it). An `embedding_width` narrower than the hidden size adds the embeddings'
    projection up, and the masked-LM head projects down to it before the vocabulary. Plus the
    architecture's own `per_token` and `per_batch` multiply-adds."""
    H, inner, L = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    E = embedding_width or H
    keys = keys or [seq_len] * L
    layers = L * (4 * H * H + (ffn_inputs + 1) * H * inner) + sum(2 * k * H for k in keys)
    token = (layers + (E * H if E != H else 0) + per_token
             + mlm_fraction * (H * E + E * config.vocab_size))
    return batch_flops(rows, seq_len, token, per_row=(H * H + 2 * H) if pooler else 0.0,
                       per_batch=per_batch, training=training)


def longest_input(config) -> int:
    """The most tokens an input of a model of `config` may hold: a position embedding each,
    counted past the padding id where the architecture's positions start there."""
    return ARCHITECTURES[config.architecture].longest_input(
        {"max_position_embeddings": config.max_position_embeddings,
         "pad_token_id": config.pad_token_id})


def of_model(model) -> Architecture:
    return ARCHITECTURES[model.config.architecture]


def model_class(class_name: str) -> type | None:
    """The model class of any architecture and role by its name (config.json's
    `architectures`), imported; None for a name none has."""
    for arch in ARCHITECTURES.values():
        for role in arch.roles():
            if arch.head_name(role) == class_name:
                return arch.head(role)
    return None


def role_of(class_name: str) -> str | None:
    """The role of a model class of any architecture, by its name (config.json's
    `architectures`); None for a class no architecture has."""
    for arch in ARCHITECTURES.values():
        for role in arch.roles():
            if arch.head_name(role) == class_name:
                return role
    return None


def recorded(value: str | None) -> str | None:
    """The architecture a manifest's `stats.architecture` names: its registered name, or (in
    manifests written before the name was recorded) one of its model classes' names."""
    if value is None or value in ARCHITECTURES:
        return value
    for arch in ARCHITECTURES.values():
        if any(arch.head_name(role) == value for role in arch.roles()):
            return arch.name
    return value


def roles_of(class_names: list[str]) -> set[str]:
    return {r for r in map(role_of, class_names) if r is not None}


def build(role: str, config, **kwargs):
    """A new model of `role` for `config` (whose class says its architecture)."""
    return ARCHITECTURES[config.architecture].head(role)(config, **kwargs)


# The activations a config.json may name (their functions: model/shared.py's ACTIVATIONS).
ACTIVATION_NAMES = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu", "swish")


def preset_shape(presets: dict[str, tuple[int, ...]], name: str,
                 num_hidden_layers: int | None = None, hidden_size: int | None = None,
                 num_attention_heads: int | None = None, intermediate_size: int | None = None,
                 feed_forward: float = 4.0) -> tuple[int, int, int, int]:
    """(layers, width, heads, feed-forward) of a size preset under the sizes given. A preset is
    (layers, width, heads) with a feed-forward of `feed_forward` x the width, or names its own
    as a fourth number; a width given without a feed-forward keeps the ratio."""
    if name not in presets:
        raise BertctlError(f"model size {name!r}: unknown preset (one of {', '.join(presets)})")
    layers, hidden, heads, *inner = presets[name]
    width = hidden_size or hidden
    ratio = inner[0] if inner and not hidden_size else int(feed_forward * width)
    return (num_hidden_layers or layers, width, num_attention_heads or heads,
            intermediate_size or ratio)


def check_config(config, positive: tuple[str, ...], rates: tuple[str, ...],
                 activations: tuple[str, ...], scales: tuple[str, ...] = (),
                 flags: tuple[str, ...] = ()) -> None:
    """The checks every architecture's config makes (BertctlError "model config: ..."): the
    `positive` fields are positive integers, the `scales` positive finite numbers (epsilons,
    rotary bases, the initialisation's spread: 0 or less makes every output NaN), the dropout
    `rates` in [0, 1), the `flags` booleans, the activations known, the heads divide the width
    and the padding id is in the vocabulary."""
    def bad(problem: str) -> BertctlError:
        return BertctlError(f"model config: {problem}")

    for name in scales:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not math.isfinite(value) or value <= 0:
            raise bad(f"{name} must be a positive number, got {value!r}")
    for name in flags:
        if not isinstance(getattr(config, name), bool):
            raise bad(f"{name} must be true or false, got {getattr(config, name)!r}")
    for name in rates:
        value = getattr(config, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise bad(f"{name} must be a number in [0, 1), got {value!r}")

    for name in positive:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise bad(f"{name} must be a positive integer, got {value!r}")
    if config.hidden_size % config.num_attention_heads:
        raise bad(f"hidden_size {config.hidden_size} is not a multiple of "
                  f"num_attention_heads {config.num_attention_heads}")
    for name in activations:
        if getattr(config, name) not in ACTIVATION_NAMES:
            raise bad(f"{name} {getattr(config, name)!r} is not supported "
                      f"(one of {', '.join(sorted(ACTIVATION_NAMES))})")
    for name in rates:
        if getattr(config, name) is not None and not 0.0 <= getattr(config, name) < 1.0:
            raise bad(f"{name} must be in [0, 1), got {getattr(config, name)!r}")
    if config.pad_token_id is not None and (
            isinstance(config.pad_token_id, bool) or not isinstance(config.pad_token_id, int)
            or not 0 <= config.pad_token_id < config.vocab_size):
        raise bad(f"pad_token_id {config.pad_token_id} is outside the vocabulary "
                  f"of {config.vocab_size}")
