"""The one way a headed model is made: an architecture's encoder and a `Head`.

The heads of the roles transformers has classes for (pretraining, masked LM, sequence
classification, multiple choice, span QA, tagging) are written once per role in roles.py; an
architecture's modeling.py says only what is its own: the modules, named as its transformers
class names them, how it pools and initialises. Their modules are the model's own (`attribute`
None), so the weights carry transformers' names. A head no transformers class has (the
retrieval family's sentence head, a plug-in's) is a Head in its family's own folder, kept under
its `attribute`, and registered with `architectures.register_head`. Either way
`Architecture.head(role)` makes the class here (`composed_class`), named by
`Architecture.head_name`: the encoder class's prefix and the role's suffix
(BertForSequenceClassification, BertForEmbedding), which is what config.json's `architectures`
carries. transformers reads a family head's directory as its bare encoder (AutoModel),
sentence-transformers as its Transformer module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from bertctl.model.dropout import set_training_dropout
from bertctl.model.features import FrozenFeatures


class Head(nn.Module):
    """A head. It keeps its weights in child modules and reads the encoder through the model
    it is given: `model.sequence(...)`, the last hidden states (or a frozen encoder's
    features), or `model.encoder(...)`. A family's own head initialises its modules itself; a
    role's (`attribute` None) is initialised by the model, as its architecture does
    (`init_module`)."""

    # Where the composed model keeps it: the first part of its weights' names. None: its
    # modules are the model's own, under their own names (transformers' `classifier`, `cls`).
    attribute: ClassVar[str | None] = "head"
    # A BERT-shaped encoder's pooler: None, the encoder's default, kept for transformers'
    # readers and frozen (the head never reads it); True, built and trained (the head reads
    # `pooler_output`); False, not built (transformers' class of the role has none).
    encoder_pooler: ClassVar[bool | None] = None
    # Whether it can read a frozen encoder's combined features (`--freeze-encoder`): it is
    # then built with them (`features`), and the model keeps their settings in config.json.
    reads_features: ClassVar[bool] = False
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

    def init_module(self, module: nn.Module) -> None:
        """A role head's: initialise one of its modules as the architecture does."""
        raise NotImplementedError

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

    def extra_files(self, model: Composed) -> dict[str, Any]:
        """Files beside config.json (Composed.extra_files)."""
        return {}

    @classmethod
    def extra_weights(cls, directory: Path, hf_config: dict[str, Any]
                      ) -> dict[str, torch.Tensor]:
        return {}


class Composed(nn.Module):
    """Every headed model: an architecture's encoder (at its `encoder_name`, BERT's `bert`,
    ModernBERT's `model`, as transformers names them) plus a `Head` (at its `attribute`, or its
    modules at the top). `dropout`: the training's rate for every dropout of the model (the
    saved config keeps the architecture's); `features`: a frozen encoder's combined features,
    for a head that reads them; the other arguments are the head's (`num_labels`, ...)."""

    head_class: ClassVar[type[Head]]
    encoder_class: ClassVar[type]
    encoder_name: ClassVar[str]
    composition: ClassVar[tuple]   # composed_class's arguments: how a pickle makes it again
    input_rank: ClassVar[int]      # the head's
    kwargs_from_any_config: ClassVar[bool]
    weights_elsewhere: ClassVar[tuple[str, ...]]

    def __init__(self, config, *head_args, dropout: float | None = None,
                 features: dict[str, Any] | None = None, **head_kwargs):
        if features is not None and not self.head_class.reads_features:
            raise ValueError(f"{type(self).__name__} does not read a frozen encoder's features")
        super().__init__()
        self.config = config
        setattr(self, self.encoder_name, self._build_encoder(config))
        # Feature-based use (the paper's ELMo-style ablation): the encoder frozen, the head
        # trained on its combined hidden states.
        self.features = None
        if features is not None:
            self.features = FrozenFeatures(config.hidden_size, **features)
            self.encoder.requires_grad_(False)
        if self.head_class.reads_features:
            head_kwargs["features"] = self.features
        head = self.head_class(config, *head_args, **head_kwargs)
        if self.head_class.attribute is None:
            if any(True for _ in head.parameters(recurse=False)) or any(
                    True for _ in head.buffers(recurse=False)):
                raise TypeError(f"{type(head).__name__}: a head whose modules are the model's "
                                f"keeps its weights in modules")
            for name, module in head.named_children():
                setattr(self, name, module)
            self.__dict__["_own_head"] = head   # not a child: its modules are the model's
            # The encoder initialised itself; the head's modules are still at PyTorch's
            # defaults (the frozen features' too).
            for name, child in self.named_children():
                if name != self.encoder_name:
                    child.apply(head.init_module)
        else:
            setattr(self, self.head_class.attribute, head)
        # A pooler the encoder keeps for transformers' readers (BERT's) that this head never
        # runs gets no gradient and no optimizer state.
        pooler = getattr(self.encoder, "pooler", None)
        if pooler is not None and self.head_class.encoder_pooler is None:
            pooler.requires_grad_(False)
        if dropout is not None:
            set_training_dropout(self, dropout)

    @property
    def encoder(self) -> nn.Module:
        return getattr(self, self.encoder_name)

    @property
    def own_head(self) -> Head:
        own = self.__dict__.get("_own_head")
        return own if own is not None else getattr(self, self.head_class.attribute)

    @property
    def num_labels(self) -> int:
        """A classifier's outputs (a role head's)."""
        return self.own_head.num_labels

    @property
    def problem_type(self) -> str:
        return self.own_head.problem_type

    def _build_encoder(self, config) -> nn.Module:
        pooler = self.head_class.encoder_pooler
        return self.encoder_class(config, **({} if pooler is None
                                              else {"add_pooling_layer": pooler}))

    def train(self, mode: bool = True):
        super().train(mode)
        self.own_head.training = mode   # (a role head is not a child)
        if self.features is not None:
            self.encoder.eval()   # a frozen encoder's features are fixed: no dropout
        return self

    def hidden_state_modules(self) -> list[nn.Module]:
        """The encoder's modules whose outputs are its hidden states 0 (the embeddings) to L."""
        return self.encoder.hidden_state_modules()

    def layer_state(self, layers: list[int]) -> dict[str, torch.Tensor]:
        """This model's weights with only `layers` of its encoder, renumbered from 0: the
        weights of the same model class with `len(layers)` layers."""
        return self.encoder.layer_state(layers, self.state_dict(),
                                        prefix=f"{self.encoder_name}.")

    @property
    def packs(self) -> bool:
        """Whether training batches may be packed (`data.collate.pack_batch`): true for heads
        that read each sequence on its own tokens, false for a BiLSTM, which would run on
        across the sequences of a row."""
        return bool(self.own_head.supports_packing) and (self.features is None
                                                         or self.features.lstm is None)

    def sequence(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None,
                 position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T, width): the encoder's last hidden states, or a frozen encoder's features."""
        if self.features is not None:
            return self.features(self.encoder, input_ids, token_type_ids, attention_mask,
                                 position_ids)
        return self.encoder(input_ids, token_type_ids, attention_mask,
                            position_ids=position_ids)["last_hidden_state"]

    def forward(self, *args, **kwargs) -> dict[str, Any]:
        return self.own_head(self, *args, **kwargs)

    def hf_config(self) -> dict[str, Any]:
        """Keys the head adds to config.json (num_labels, problem_type, ...), and the frozen
        features' settings. Those are not a transformers key: transformers would load such a
        checkpoint's classifier onto the last layer's output and drop the mixing and LSTM
        weights."""
        features = {"bertctl_features": self.features.settings()} if self.features else {}
        return {**self.own_head.hf_config(), **features}

    @classmethod
    def kwargs_from_hf(cls, hf_config: dict[str, Any]) -> dict[str, Any]:
        """Constructor arguments recovered from a config.json this model wrote."""
        features = hf_config.get("bertctl_features")
        read = ({"features": features} if cls.head_class.reads_features
                and isinstance(features, dict) else {})
        return {**cls.head_class.kwargs_from_hf(hf_config), **read}

    def extra_files(self) -> dict[str, Any]:
        """Files written beside config.json (path relative to the model directory -> text, a
        JSON-able object, or a dict of tensors for a safetensors file): another library's
        layout of the same model (sentence-transformers' modules)."""
        return self.own_head.extra_files(self)

    @classmethod
    def extra_weights(cls, directory, hf_config: dict[str, Any]) -> dict[str, torch.Tensor]:
        """The weights of `weights_elsewhere`, read back from a directory's other files."""
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
