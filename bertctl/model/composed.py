"""A model composed of an architecture's encoder and a task family's own head (#65).

An architecture provides its encoder and the heads transformers has a class for (pretraining,
sequence classification, span QA, tagging, multiple choice): their weights' names and their
pooling are that transformers class's (BERT's pooler, ModernBERT's head and mean pooling), so
they live with the architecture, one readable file each. A head no transformers class has (the
retrieval family's sentence head, a plug-in's) is written once, as a `Head` in its family's own
folder, and registered with `architectures.register_head`; `build` and `load_model` pair it
with any architecture's encoder. The pair's class is made here, named by the mapping
`Architecture.head_name` (the encoder class's prefix and the head's suffix: BertForEmbedding,
ModernBertForEmbedding), which is what config.json's `architectures` carries: transformers
reads such a directory as its bare encoder (AutoModel), sentence-transformers as its Transformer
module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from bertctl.model.dropout import set_training_dropout
from bertctl.model.shared import EncoderWithHead


class Head(nn.Module):
    """A family's own head. It keeps its weights in child modules (their names start with
    `attribute` in the model's state dict), initialises them itself, and reads the encoder
    through the model it is given: `model.sequence(...)`, the last hidden states."""

    # Where the composed model keeps it: the first part of its weights' names.
    attribute: ClassVar[str] = "head"
    # (batch, sequence) inputs; 3: (batch, group, sequence), e.g. a query and its documents.
    input_rank: ClassVar[int] = 2
    # Whether training batches may be packed (several sequences a row): only for a head that
    # reads each sequence's own tokens from `sequence_starts`.
    supports_packing: ClassVar[bool] = False
    # Whether its settings may be read from any config.json (a sentence-transformers model's
    # names a bare encoder), not only from one this head wrote.
    kwargs_from_any_config: ClassVar[bool] = False
    # State-dict prefixes whose weights `extra_files` writes, not model.safetensors.
    weights_elsewhere: ClassVar[tuple[str, ...]] = ()

    def forward(self, model: Composed, input_ids: torch.Tensor,
                token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, **targets) -> dict[str, Any]:
        """The model's outputs by name, with "loss" when the targets are given."""
        raise NotImplementedError

    def hf_config(self) -> dict[str, Any]:
        """Keys this head adds to config.json (what `kwargs_from_hf` reads back)."""
        return {}

    @classmethod
    def kwargs_from_hf(cls, hf_config: dict[str, Any]) -> dict[str, Any]:
        return {}

    @classmethod
    def composed(cls, encoder_class: type, encoder_name: str, name: str,
                 what: str) -> type[Composed]:
        """This head on `encoder_class` (kept at `encoder_name`), as the class `name`: what
        `Architecture.head` asks for a registered head's role (`what` says which pair)."""
        return composed_class(name, encoder_class, encoder_name, cls, what)

    def extra_files(self, model: Composed) -> dict[str, Any]:
        """Files beside config.json (EncoderWithHead.extra_files)."""
        return {}

    @classmethod
    def extra_weights(cls, directory: Path, hf_config: dict[str, Any]
                      ) -> dict[str, torch.Tensor]:
        return {}


class Composed(EncoderWithHead):
    """An architecture's encoder (at its `encoder_name`) plus a `Head` (at its `attribute`).
    `dropout`: the training's rate for every dropout of the model (the saved config keeps the
    architecture's)."""

    head_class: ClassVar[type[Head]]
    encoder_class: ClassVar[type]
    composition: ClassVar[tuple]   # composed_class's arguments: how a pickle makes it again

    def __init__(self, config, dropout: float | None = None, **head_kwargs):
        super().__init__(config)
        setattr(self, self.head_class.attribute, self.head_class(config, **head_kwargs))
        # A pooler some encoders keep for transformers' readers (BERT's): a head reading the
        # hidden states never runs it, so it gets no gradient and no optimizer state.
        pooler = getattr(self.encoder, "pooler", None)
        if pooler is not None:
            pooler.requires_grad_(False)
        if dropout is not None:
            set_training_dropout(self, dropout)

    @property
    def own_head(self) -> Head:
        return getattr(self, self.head_class.attribute)

    def _build_encoder(self, config) -> nn.Module:
        return self.encoder_class(config)

    def sequence(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None,
                 position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T, H): the encoder's last hidden states."""
        return self._sequence(input_ids, token_type_ids, attention_mask, position_ids)

    def forward(self, *args, **kwargs) -> dict[str, Any]:
        return self.own_head(self, *args, **kwargs)

    def hf_config(self) -> dict[str, Any]:
        return self.own_head.hf_config()

    @classmethod
    def kwargs_from_hf(cls, hf_config: dict[str, Any]) -> dict[str, Any]:
        return cls.head_class.kwargs_from_hf(hf_config)

    def extra_files(self) -> dict[str, Any]:
        return self.own_head.extra_files(self)

    @classmethod
    def extra_weights(cls, directory, hf_config: dict[str, Any]) -> dict[str, torch.Tensor]:
        return cls.head_class.extra_weights(directory, hf_config)

    def __reduce_ex__(self, protocol):
        # The class is made at run time, so a pickle names how to make it, not where it is.
        return _instance_of, (self.composition,), self.__dict__.copy()


# One class per (architecture, head): the same class object each time it is asked for, so a
# model's type names its role (architectures.role_of) and isinstance holds between calls.
_CLASSES: dict[tuple, type] = {}


def composed_class(name: str, encoder_class: type, encoder_name: str, head_class: type[Head],
                   what: str) -> type[Composed]:
    composition = (name, encoder_class, encoder_name, head_class, what)
    found = _CLASSES.get(composition[:4])
    if found is None:
        found = _CLASSES[composition[:4]] = type(name, (Composed,), {
            "__module__": __name__, "__qualname__": name,
            "__doc__": f"{what} ({head_class.__module__}.{head_class.__qualname__}).",
            "head_class": head_class, "encoder_class": encoder_class,
            "encoder_name": encoder_name, "composition": composition,
            **{k: getattr(head_class, k) for k in ("input_rank", "supports_packing",
                                                   "kwargs_from_any_config",
                                                   "weights_elsewhere")}})
    return found


def _instance_of(composition: tuple) -> Composed:
    cls = composed_class(*composition)
    return cls.__new__(cls)


__all__ = ["Composed", "Head", "composed_class"]
