"""ELECTRA's encoder and heads: BERT's layers (model/bert) under embeddings of their own width,
projected to the hidden width (`embeddings_project`), no pooler, and heads under transformers'
names (`electra`, `classifier.dense` / `out_proj` with GELU, `sequence_summary.summary`,
`generator_predictions` / `generator_lm_head`), so a state dict moves between bertctl and
transformers' Electra* classes unchanged."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bertctl.model.bert.modeling import (BertEmbeddings, BertModel, BertWithHead,
                                         init_bert_weights)
from bertctl.model.dropout import Dropout
from bertctl.model.electra.config import ElectraConfig
from bertctl.model.roles import (MultipleChoice, QuestionAnswering, SequenceClassifier,
                                 TokenClassifier, masked_lm)
from bertctl.model.shared import ACTIVATIONS, DenseClassificationHead, TiedOutputBias


class ElectraEmbeddings(BertEmbeddings):
    """BERT's embeddings at the embedding width."""

    def __init__(self, config: ElectraConfig):
        super().__init__(replace(config, hidden_size=config.embedding_width,
                                 num_attention_heads=1, embedding_size=None))


class ElectraModel(BertModel):
    """BERT's encoder under ELECTRA's embeddings, projected to the width where narrower; no
    pooler (transformers' ElectraModel has none)."""

    embeddings_class = ElectraEmbeddings

    def __init__(self, config: ElectraConfig, add_pooling_layer: bool = False):
        super().__init__(config, add_pooling_layer=False)
        if config.embedding_width != config.hidden_size:
            self.embeddings_project = nn.Linear(config.embedding_width, config.hidden_size)
            init_bert_weights(self.embeddings_project, config.initializer_range)

    def embed(self, input_ids, token_type_ids, position_ids) -> torch.Tensor:
        x = self.embeddings(input_ids, token_type_ids, position_ids)
        project = getattr(self, "embeddings_project", None)
        return x if project is None else project(x)

    def hidden_state_modules(self) -> list[nn.Module]:
        first = getattr(self, "embeddings_project", None) or self.embeddings
        return [first, *self.encoder.layer]


class ElectraWithHead(BertWithHead):
    encoder_name = "electra"
    encoder_class = ElectraModel
    add_pooling_layer = False


class ElectraForSequenceClassification(SequenceClassifier, ElectraWithHead):
    def __init__(self, config: ElectraConfig, num_labels: int | None = None,
                 problem_type: str = "single_label_classification",
                 features: dict[str, Any] | None = None):
        super().__init__(config, features)
        width = self.features.width if self.features is not None else config.hidden_size
        # GELU where BERT's pooler has tanh
        self.classifier = DenseClassificationHead(
            config, width, self._problem(num_labels, problem_type), F.gelu)
        self._init_head()

    def _classify(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(x)


class ElectraSequenceSummary(nn.Module):
    """transformers' summary as ELECTRA configures it: the first token, a projection, the
    summary activation, dropout."""

    def __init__(self, config: ElectraConfig):
        super().__init__()
        self.summary = nn.Linear(config.hidden_size, config.hidden_size)
        act = config.summary_activation
        self.act = ACTIVATIONS[act] if act else (lambda x: x)
        self.last_dropout = Dropout(config.summary_last_dropout)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.last_dropout(self.act(self.summary(hidden[:, 0])))


class ElectraForMultipleChoice(MultipleChoice, ElectraWithHead):
    def __init__(self, config: ElectraConfig):
        super().__init__(config)
        self.sequence_summary = ElectraSequenceSummary(config)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self._init_head()

    def _pool(self, input_ids, token_type_ids, attention_mask) -> torch.Tensor:
        return self.sequence_summary(
            self.electra(input_ids, token_type_ids, attention_mask)["last_hidden_state"])

    def _classify(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(x)


class ElectraForQuestionAnswering(QuestionAnswering, ElectraWithHead):
    def __init__(self, config: ElectraConfig):
        super().__init__(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self._init_head()

    def _span_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.qa_outputs(hidden)


class ElectraForTokenClassification(TokenClassifier, ElectraWithHead):
    def __init__(self, config: ElectraConfig, num_labels: int = 2,
                 features: dict[str, Any] | None = None):
        super().__init__(config, features)
        self.num_labels = num_labels
        self._add_classifier(num_labels)


class ElectraGeneratorPredictions(nn.Module):
    def __init__(self, config: ElectraConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.embedding_width)
        self.LayerNorm = nn.LayerNorm(config.embedding_width, eps=config.layer_norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(F.gelu(self.dense(x)))


class ElectraForMaskedLM(ElectraWithHead):
    """An ELECTRA generator's masked LM (transformers' ElectraForMaskedLM)."""

    def __init__(self, config: ElectraConfig):
        super().__init__(config)
        self.generator_predictions = ElectraGeneratorPredictions(config)
        self.generator_lm_head = TiedOutputBias(config.vocab_size)
        self._init_head()

    def _predict(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(self.generator_predictions(hidden),
                        self.electra.embeddings.word_embeddings.weight,
                        self.generator_lm_head.bias)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        enc = self.electra(input_ids, token_type_ids, attention_mask)
        out = masked_lm(self._predict, enc["last_hidden_state"], labels)
        if labels is not None:
            out["loss"] = out["mlm_loss"]
        return out
