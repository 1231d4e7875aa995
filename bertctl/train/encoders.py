"""What the training loop sets and reads in a model's encoders, reached through the Encoder
protocol's attributes (model/architectures.py), never by importing model/: a student's and its
teacher's, a generator's and its discriminator's, each once."""

from __future__ import annotations

from typing import Any

from torch import nn


def encoders(model: nn.Module) -> list[nn.Module]:
    """The encoders in `model` (those with the protocol's compile_layers)."""
    return [m for m in model.modules() if hasattr(m, "compile_layers")]


def attention_policies(model: nn.Module) -> list[Any]:
    """The attention policies of the encoders in `model` (architectures.Encoder's
    attention_policy), each once."""
    found = {}
    for module in model.modules():
        policy = getattr(module, "attention_policy", None)
        if policy is not None:
            found[id(policy)] = policy
    return list(found.values())


def layer_depths(model: nn.Module) -> dict[int, int]:
    """id(parameter) -> its depth in its encoder: 0 the embeddings, i the i-th layer (the
    modules whose outputs are the hidden states: EncoderBase.hidden_state_modules). Weights
    outside them (the head, a pooler, a final norm) are not in it."""
    depths: dict[int, int] = {}
    for encoder in encoders(model):
        for depth, module in enumerate(encoder.hidden_state_modules()):
            for p in module.parameters():
                depths.setdefault(id(p), depth)
    return depths


def set_checkpointing(model: nn.Module, on: bool) -> None:
    """--gradient-checkpointing: each encoder recomputes its layers in the backward pass."""
    for module in model.modules():
        if hasattr(module, "gradient_checkpointing"):
            module.gradient_checkpointing = on


__all__ = ["attention_policies", "encoders", "layer_depths", "set_checkpointing"]
