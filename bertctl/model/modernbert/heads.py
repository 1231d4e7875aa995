"""ModernBERT's heads under transformers' names: the encoder at `model`, the shared head
transform at `head` (dense, activation, norm), then the `decoder` (masked LM, tied to the token
embeddings) or the `classifier`. Inputs and outputs are those of the BERT heads in
`model.bert.heads`, so the stages, the loop and the task families use either without asking which.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bertctl.model.sentence import mean_pool
from bertctl.model.dropout import Dropout
from bertctl.model.shared import ACTIVATIONS, EncoderWithHead, first_tokens
from bertctl.model.roles import (MultipleChoice, QuestionAnswering,
                                 SequenceClassifier, TokenClassifier, masked_lm)
from bertctl.model.modernbert.config import ModernBertConfig
from bertctl.model.modernbert.encoder import ModernBertModel, init_modernbert_weights


class ModernBertPredictionHead(nn.Module):
    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size,
                               bias=config.classifier_bias)
        self.act = ACTIVATIONS[config.classifier_activation]
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.act(self.dense(x)))


class ModernBertWithHead(EncoderWithHead):
    encoder_name = "model"

    def _build_encoder(self, config: ModernBertConfig) -> nn.Module:
        return ModernBertModel(config)

    def _init_module(self, module: nn.Module) -> None:
        init_modernbert_weights(module, self.config)
        if isinstance(module, nn.Linear) and module is getattr(self, "classifier", None):
            # transformers' classifier init: N(0, 1/sqrt(hidden)), as a final output layer.
            cut = self.config.initializer_cutoff_factor * self.config.hidden_size ** -0.5
            nn.init.trunc_normal_(module.weight, std=self.config.hidden_size ** -0.5,
                                  a=-cut, b=cut)

    def _add_classifier(self, num_outputs: int) -> None:
        """`head` (unless a frozen encoder's features are read), `drop`, `classifier`."""
        if self.features is None:
            self.head = ModernBertPredictionHead(self.config)
        self.drop = Dropout(self.config.classifier_dropout)
        width = self.features.width if self.features is not None else self.config.hidden_size
        self.classifier = nn.Linear(width, num_outputs)
        self._init_head()

    def _classify(self, pooled: torch.Tensor) -> torch.Tensor:
        if self.features is None:
            pooled = self.head(pooled)
        return self.classifier(self.drop(pooled))


class ModernBertForMaskedLM(ModernBertWithHead):
    """The masked LM: `head`, then the token-embedding table as the decoder (transformers
    re-ties `decoder.weight` from tie_word_embeddings; only `decoder.bias` is saved)."""

    def __init__(self, config: ModernBertConfig):
        super().__init__(config)
        self.head = ModernBertPredictionHead(config)
        self.decoder = nn.Module()
        if config.decoder_bias:
            self.decoder.bias = nn.Parameter(torch.zeros(config.vocab_size))
        self._init_head()

    def _predict(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(self.head(hidden), self.model.embeddings.tok_embeddings.weight,
                        getattr(self.decoder, "bias", None))

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        enc = self.model(input_ids, None, attention_mask, position_ids=position_ids)
        out = masked_lm(self._predict, enc["last_hidden_state"], labels)
        if labels is not None:
            out["loss"] = out["mlm_loss"]
        return out


class ModernBertForSequenceClassification(SequenceClassifier, ModernBertWithHead):
    """The first token's state (classifier_pooling "cls") or the mean of the real tokens'
    ("mean"), then head, drop, classifier."""

    def __init__(self, config: ModernBertConfig, num_labels: int | None = None,
                 problem_type: str = "single_label_classification",
                 features: dict[str, Any] | None = None):
        super().__init__(config, features)
        self._add_classifier(self._problem(num_labels, problem_type))

    @property
    def packs(self) -> bool:
        # A packed row's mean would need each sequence's own span: only [CLS] pooling packs.
        return super().packs and self.config.classifier_pooling == "cls"

    def _pool(self, input_ids, token_type_ids, attention_mask, position_ids=None,
              sequence_starts=None) -> torch.Tensor:
        hidden = self._sequence(input_ids, None, attention_mask, position_ids)
        if self.config.classifier_pooling == "mean":
            return mean_pool(hidden, attention_mask)
        return first_tokens(hidden, sequence_starts)


class ModernBertForMultipleChoice(MultipleChoice, ModernBertWithHead):
    def __init__(self, config: ModernBertConfig):
        super().__init__(config)
        self._add_classifier(1)

    def _pool(self, input_ids, token_type_ids, attention_mask) -> torch.Tensor:
        hidden = self.model(input_ids, None, attention_mask)["last_hidden_state"]
        if self.config.classifier_pooling == "mean":
            return mean_pool(hidden, attention_mask)
        return hidden[:, 0]


class ModernBertForQuestionAnswering(QuestionAnswering, ModernBertWithHead):
    def __init__(self, config: ModernBertConfig):
        super().__init__(config)
        self._add_classifier(2)

    def _span_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self._classify(hidden)


class ModernBertForTokenClassification(TokenClassifier, ModernBertWithHead):
    def __init__(self, config: ModernBertConfig, num_labels: int = 2,
                 features: dict[str, Any] | None = None):
        super().__init__(config, features)
        self.num_labels = num_labels
        self._add_classifier(num_labels)
