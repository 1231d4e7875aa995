"""Model architectures as plug-ins: each names its config class (which knows its size presets) and
its model class for each role (the bare encoder, the pretraining heads, the fine-tuning heads).

The rest of bertctl asks for a role ("sequence_classification") and gets the class of the
architecture at hand: config.json's `model_type` says which for a saved model, `pretrain
--architecture` for a new one. Adding one is a module that registers an `Architecture`, and its
import in bertctl/model/__init__.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bertctl.errors import BertctlError
from bertctl.registry import Registry

# What a model class is for. The objectives train "pretraining", "masked_lm" or "electra"; each
# task family fine-tunes one of the last five; "encoder" is the bare encoder (embed, export).
ROLES = ("encoder", "pretraining", "masked_lm", "electra", "sequence_classification",
         "multiple_choice", "question_answering", "token_classification", "embedding")


@dataclass(frozen=True)
class Architecture:
    name: str
    model_type: str                       # config.json's
    config_class: type
    heads: dict[str, type]                # role -> model class
    # Where its headed models keep the encoder (transformers' base_model_prefix).
    encoder_name: str
    # The first names of a bare encoder's keys (a checkpoint saved without a head), which a
    # headed model holds under its encoder's name.
    bare_prefixes: tuple[str, ...]
    # Checkpoint entries that are not parameters and need no report (tied decoders, buffers).
    ignored_keys: tuple[str, ...] = ()
    # onnxruntime's transformer optimizer's model_type for its fused operators (export
    # --optimize); None: it has no fusions for this graph (onnxruntime's own graph
    # optimizations still run when a session loads it).
    onnx_fusions: str | None = None
    # Said when an input is longer than the model's max_position_embeddings (after the refusal).
    positions_note: str = ""

    def head(self, role: str, where: str = "model") -> type:
        if role not in self.heads:
            raise BertctlError(f"{where}: the {self.name} architecture has no "
                               f"{role.replace('_', ' ')} model")
        return self.heads[role]

    def config_from_hf(self, hf: dict[str, Any], source: str):
        return self.config_class.from_hf_dict(hf, source=source)


ARCHITECTURES: Registry[Architecture] = Registry("architecture")
register = ARCHITECTURES.register


# Keys only a ModernBERT config has: a config.json without model_type that holds them is a
# ModernBERT whose model_type was lost, not an old BERT file.
_NOT_BERT = ("layer_types", "global_rope_theta", "rope_parameters", "norm_eps",
             "local_attention", "hidden_activation")


def of_config(hf: dict[str, Any], source: str = "config.json") -> Architecture:
    """The architecture of a parsed config.json (by model_type; none: BERT, as old files)."""
    if isinstance(hf, dict) and "model_type" not in hf:
        other = [k for k in _NOT_BERT if k in hf]
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


def of_model(model) -> Architecture:
    return ARCHITECTURES[model.config.architecture]


def role_of(class_name: str) -> str | None:
    """The role of a model class of any architecture, by its name (config.json's
    `architectures`); None for a class no architecture has."""
    for arch in ARCHITECTURES.values():
        for role, cls in arch.heads.items():
            if cls.__name__ == class_name:
                return role
    return None


def roles_of(class_names: list[str]) -> set[str]:
    return {r for r in map(role_of, class_names) if r is not None}


def build(role: str, config, **kwargs):
    """A new model of `role` for `config` (whose class says its architecture)."""
    return ARCHITECTURES[config.architecture].head(role)(config, **kwargs)
