"""Task heads on the shared encoder: pretraining (MLM + NSP) and the fine-tuning families.

Each model keeps the encoder at `bert` and names its head as Hugging Face does (`cls.*`,
`classifier`, `qa_outputs`), so state dicts and config.json `architectures` match HF's classes
of the same name. Every forward returns a dict with "loss" only when labels were given.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bertctl.data import IGNORE_INDEX
from bertctl.model.bert import BertModel, first_tokens, init_bert_weights
from bertctl.model.config import ACTIVATIONS, BertConfig
from bertctl.model.dropout import Dropout
from bertctl.model.features import FrozenFeatures



class BertWithHead(nn.Module):
    """The encoder at `bert` plus a head; subclasses build the head and call `_init_head()`."""

    add_pooling_layer = True
    supports_packing = False   # see `packs`
    input_rank = 2   # (batch, sequence) inputs; multiple choice: (batch, choices, sequence)

    def __init__(self, config: BertConfig, features: dict[str, Any] | None = None):
        super().__init__()
        self.config = config
        self.bert = BertModel(config, add_pooling_layer=self.add_pooling_layer)
        # Feature-based use (the paper's ELMo-style ablation): the encoder frozen, the head
        # trained on its combined hidden states. Heads that support it pass `features`.
        self.features = None
        if features is not None:
            self.features = FrozenFeatures(config.hidden_size, **features)
            self.bert.requires_grad_(False)

    def train(self, mode: bool = True):
        super().train(mode)
        if self.features is not None:
            self.bert.eval()   # a frozen encoder's features are fixed: no dropout
        return self

    def hidden_state_modules(self) -> list[nn.Module]:
        """The encoder's modules whose outputs are its hidden states 0 (the embeddings) to L."""
        return self.bert.hidden_state_modules()

    def layer_state(self, layers: list[int]) -> dict[str, torch.Tensor]:
        """This model's weights with only `layers` of its encoder, renumbered from 0: the
        weights of the same model class with `len(layers)` layers."""
        return self.bert.layer_state(layers, self.state_dict(), prefix="bert.")

    @property
    def packs(self) -> bool:
        """Whether training batches may be packed (`data.collate.pack_batch`): true for heads
        that read each sequence on its own tokens, false for a BiLSTM, which would run on
        across the sequences of a row."""
        return self.supports_packing and (self.features is None or self.features.lstm is None)

    def _sequence(self, input_ids, token_type_ids, attention_mask,
                  position_ids=None) -> torch.Tensor:
        """(B, T, width): the last hidden state, or the frozen encoder's features."""
        if self.features is not None:
            return self.features(self.bert, input_ids, token_type_ids, attention_mask,
                                 position_ids)
        return self.bert(input_ids, token_type_ids, attention_mask,
                         position_ids=position_ids)["last_hidden_state"]

    def _feature_config(self) -> dict[str, Any]:
        # Not a transformers key: transformers would load such a checkpoint's classifier onto
        # the last layer's output and drop the mixing and LSTM weights.
        return {"bertctl_features": self.features.settings()} if self.features else {}

    @staticmethod
    def _feature_kwargs(hf_config: dict[str, Any]) -> dict[str, Any]:
        features = hf_config.get("bertctl_features")
        return {"features": features} if isinstance(features, dict) else {}

    def _init_head(self) -> None:
        # The encoder initialised itself; only the head's modules are still at PyTorch defaults.
        for name, child in self.named_children():
            if name != "bert":
                child.apply(lambda m: init_bert_weights(m, self.config.initializer_range))

    def _add_classifier(self, num_outputs: int) -> None:
        """HF's classifier head: `dropout` (classifier_dropout, else the hidden dropout) then a
        linear `classifier`, initialised; the names match HF's weights."""
        p = self.config.classifier_dropout
        self.dropout = Dropout(self.config.hidden_dropout_prob if p is None else p)
        width = self.features.width if self.features is not None else self.config.hidden_size
        self.classifier = nn.Linear(width, num_outputs)
        self._init_head()

    def hf_config(self) -> dict[str, Any]:
        """Keys this head adds to config.json (num_labels, problem_type, ...)."""
        return {}

    @classmethod
    def kwargs_from_hf(cls, hf_config: dict[str, Any]) -> dict[str, Any]:
        """Constructor arguments recovered from a config.json this head wrote."""
        return {}


# ---------------------------------------------------------------------------------------------
# Pretraining


class BertPredictionHeadTransform(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = ACTIVATIONS[config.hidden_act]
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.act(self.dense(x)))


class BertLMPredictionHead(nn.Module):
    """transform, then the vocabulary projection. Its weight is the word embedding table, passed
    in at call time, so the tie cannot break (resizing, loading, DDP) and is never saved twice;
    only the output bias is the head's own."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.transform = BertPredictionHeadTransform(config)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        return F.linear(self.transform(x), word_embeddings, self.bias)


class BertPreTrainingHeads(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.predictions = BertLMPredictionHead(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)


class BertForPreTraining(BertWithHead):
    """Masked LM (`masked_lm`) + next-sentence prediction, BERT's two pretraining tasks.
    `next_sentence_label=None` trains MLM only (data built without NSP)."""

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.cls = BertPreTrainingHeads(config)
        self._init_head()

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                next_sentence_label: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        enc = self.bert(input_ids, token_type_ids, attention_mask)
        out = masked_lm(self.cls.predictions, self.bert, enc["last_hidden_state"], labels)
        out["nsp_logits"] = self.cls.seq_relationship(enc["pooler_output"])
        losses = [out["mlm_loss"]] if labels is not None else []
        if next_sentence_label is not None:
            out["nsp_loss"] = F.cross_entropy(out["nsp_logits"].float(), next_sentence_label.reshape(-1))
            losses.append(out["nsp_loss"])
        if losses:
            out["loss"] = sum(losses[1:], losses[0])
        return out


def masked_lm(predictions: BertLMPredictionHead, bert: BertModel, hidden: torch.Tensor,
              labels: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """The masked-LM outputs: with `labels` ((B, T), IGNORE_INDEX where nothing is predicted)
    the hidden states of the labelled positions are gathered *before* the head (only ~15% of
    positions pay for the vocabulary projection, which for small models costs more than the
    whole encoder), and the loss over them."""
    out: dict[str, torch.Tensor] = {}
    if labels is not None:
        flat = labels.reshape(-1)
        where = (flat != IGNORE_INDEX).nonzero().squeeze(1)
        hidden = hidden.reshape(-1, hidden.size(-1)).index_select(0, where)
        out["mlm_targets"] = flat.index_select(0, where)
    out["mlm_logits"] = predictions(hidden, bert.embeddings.word_embeddings.weight)
    if labels is not None:
        if out["mlm_targets"].numel():
            out["mlm_loss"] = F.cross_entropy(out["mlm_logits"].float(), out["mlm_targets"])
        else:  # nothing masked in this batch: a zero that still reaches every parameter
            out["mlm_loss"] = out["mlm_logits"].sum() * 0.0
    return out


class BertOnlyMLMHead(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.predictions = BertLMPredictionHead(config)


class BertForMaskedLM(BertWithHead):
    """Masked LM alone (RoBERTa's objective), as transformers' BertForMaskedLM: no pooler, the
    head at `cls.predictions`, the decoder tied to the word embeddings."""

    add_pooling_layer = False

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.cls = BertOnlyMLMHead(config)
        self._init_head()

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        enc = self.bert(input_ids, token_type_ids, attention_mask)
        out = masked_lm(self.cls.predictions, self.bert, enc["last_hidden_state"], labels)
        if labels is not None:
            out["loss"] = out["mlm_loss"]
        return out


# ---------------------------------------------------------------------------------------------
# Fine-tuning


class BertForSequenceClassification(BertWithHead):
    """Dropout + linear on the pooled [CLS]: classification (CE) or regression (MSE, 1 output)."""

    PROBLEM_TYPES = ("single_label_classification", "regression")
    supports_packing = True

    def __init__(self, config: BertConfig, num_labels: int | None = None,
                 problem_type: str = "single_label_classification",
                 features: dict[str, Any] | None = None):
        super().__init__(config, features)
        if problem_type not in self.PROBLEM_TYPES:
            raise ValueError(f"problem_type must be one of {self.PROBLEM_TYPES}, got {problem_type!r}")
        if num_labels is None:
            num_labels = 1 if problem_type == "regression" else 2
        if problem_type == "regression" and num_labels != 1:
            raise ValueError(f"regression has one output, got num_labels={num_labels}")
        self.num_labels, self.problem_type = num_labels, problem_type
        self._add_classifier(num_labels)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None,
                sequence_starts: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        if self.features is not None:   # feature-based: the combined [CLS] vector
            pooled = first_tokens(self._sequence(input_ids, token_type_ids, attention_mask,
                                                 position_ids), sequence_starts)
        else:
            pooled = self.bert(input_ids, token_type_ids, attention_mask,
                               position_ids=position_ids,
                               sequence_starts=sequence_starts)["pooler_output"]
        if self.problem_type == "regression":
            # A score is read as a number, not an argmax: bf16's 8 bits of mantissa would round
            # STS-B's 0-5 scores to steps of 1/64 and tie their ranks (Spearman). One output
            # costs nothing to compute in fp32, under autocast or not.
            with torch.autocast(pooled.device.type, enabled=False):
                logits = self.classifier(self.dropout(pooled).float())
        else:
            logits = self.classifier(self.dropout(pooled))
        out = {"logits": logits}
        if labels is not None:
            if self.problem_type == "regression":
                out["loss"] = F.mse_loss(logits.float().squeeze(-1), labels.float().reshape(-1))
            else:
                out["loss"] = F.cross_entropy(logits.float(), labels.reshape(-1))
        return out

    def hf_config(self) -> dict[str, Any]:
        return {"problem_type": self.problem_type, **_label_maps(self.num_labels),
                **self._feature_config()}

    @classmethod
    def kwargs_from_hf(cls, hf_config: dict[str, Any]) -> dict[str, Any]:
        kwargs = {"num_labels": _num_labels(hf_config), **cls._feature_kwargs(hf_config)}
        if hf_config.get("problem_type") in cls.PROBLEM_TYPES:
            kwargs["problem_type"] = hf_config["problem_type"]
        elif kwargs["num_labels"] == 1:
            kwargs["problem_type"] = "regression"
        return {k: v for k, v in kwargs.items() if v is not None}


class BertForMultipleChoice(BertWithHead):
    """One score per (context, choice) pair from the pooled [CLS]; softmax over the choices.

    Inputs are (B, C, T); the C choices run through the encoder as C * B sequences.
    """

    input_rank = 3

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self._add_classifier(1)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        B, C, T = input_ids.shape

        def flat(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.reshape(B * C, T)

        pooled = self.bert(flat(input_ids), flat(token_type_ids), flat(attention_mask))["pooler_output"]
        logits = self.classifier(self.dropout(pooled)).view(B, C)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = F.cross_entropy(logits.float(), labels.reshape(-1))
        return out


class BertForQuestionAnswering(BertWithHead):
    """Start and end logits per token for extractive span QA (SQuAD).

    Gold positions outside the window (>= T, e.g. an answer cut off by the doc stride) carry no
    loss, as in HF; the loss is the mean of the start and end cross-entropies.
    """

    add_pooling_layer = False

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self._init_head()

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None,
                start_positions: torch.Tensor | None = None,
                end_positions: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        hidden = self.bert(input_ids, token_type_ids, attention_mask)["last_hidden_state"]
        start_logits, end_logits = self.qa_outputs(hidden).float().unbind(-1)
        out = {"start_logits": start_logits, "end_logits": end_logits}
        if start_positions is not None and end_positions is not None:
            T = start_logits.size(1)
            start = start_positions.reshape(-1).clamp(0, T)
            end = end_positions.reshape(-1).clamp(0, T)
            out["loss"] = (F.cross_entropy(start_logits, start, ignore_index=T)
                           + F.cross_entropy(end_logits, end, ignore_index=T)) / 2
        return out

    def hf_config(self) -> dict[str, Any]:
        return _label_maps(2)  # HF sizes qa_outputs by num_labels, which defaults to 2


class BertForTokenClassification(BertWithHead):
    """Per-token labels (NER tagging); positions labelled IGNORE_INDEX carry no loss."""

    add_pooling_layer = False
    supports_packing = True

    def __init__(self, config: BertConfig, num_labels: int = 2,
                 features: dict[str, Any] | None = None):
        super().__init__(config, features)
        self.num_labels = num_labels
        self._add_classifier(num_labels)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        hidden = self._sequence(input_ids, token_type_ids, attention_mask, position_ids)
        logits = self.classifier(self.dropout(hidden))
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = F.cross_entropy(logits.float().reshape(-1, self.num_labels),
                                          labels.reshape(-1), ignore_index=IGNORE_INDEX)
        return out

    def hf_config(self) -> dict[str, Any]:
        return {**_label_maps(self.num_labels), **self._feature_config()}

    @classmethod
    def kwargs_from_hf(cls, hf_config: dict[str, Any]) -> dict[str, Any]:
        n = _num_labels(hf_config)
        return {**({} if n is None else {"num_labels": n}), **cls._feature_kwargs(hf_config)}


def _label_maps(num_labels: int) -> dict[str, Any]:
    # HF derives num_labels from id2label; these placeholders are what it writes by default.
    # The caller's real label names (extra_config) replace them.
    return {"id2label": {str(i): f"LABEL_{i}" for i in range(num_labels)},
            "label2id": {f"LABEL_{i}": i for i in range(num_labels)}}


def _num_labels(hf_config: dict[str, Any]) -> int | None:
    if isinstance(hf_config.get("id2label"), dict) and hf_config["id2label"]:
        return len(hf_config["id2label"])
    n = hf_config.get("num_labels")
    return n if isinstance(n, int) and n > 0 else None


HEADS: dict[str, type[nn.Module]] = {cls.__name__: cls for cls in (
    BertModel, BertForPreTraining, BertForMaskedLM, BertForSequenceClassification,
    BertForMultipleChoice,
    BertForQuestionAnswering, BertForTokenClassification)}
