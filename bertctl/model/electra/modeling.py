"""ELECTRA's encoder and heads: BERT's layers (model/bert) under embeddings of their own width,
projected to the hidden width (`embeddings_project`), no pooler, and heads under transformers'
names (`electra`, `classifier.dense` / `out_proj` with GELU, `sequence_summary.summary`,
`generator_predictions` / `generator_lm_head`), so a state dict moves between bertctl and
transformers' Electra* classes unchanged."""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

from bertctl.model.bert.modeling import (BertDenseClassifierHead, BertEmbeddings, BertHead,
                                         BertModel, BertQuestionAnsweringHead,
                                         BertTokenClassificationHead, init_bert_weights)
from bertctl.model.dropout import Dropout
from bertctl.model.electra.config import ElectraConfig
from bertctl.model.roles import MaskedLM, MultipleChoice
from bertctl.model.shared import ACTIVATIONS, TiedOutputBias


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


# ---------------------------------------------------------------------------------------------
# Heads: ELECTRA's own; span QA and tagging are BERT's.

ElectraQuestionAnsweringHead = BertQuestionAnsweringHead
ElectraTokenClassificationHead = BertTokenClassificationHead


class ElectraSequenceClassificationHead(BertDenseClassifierHead):
    activation = staticmethod(F.gelu)   # where BERT's pooler has tanh


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


class ElectraMultipleChoiceHead(BertHead, MultipleChoice):
    def __init__(self, config: ElectraConfig):
        super().__init__(config)
        self.sequence_summary = ElectraSequenceSummary(config)
        self.classifier = nn.Linear(config.hidden_size, 1)

    def pool(self, model, input_ids, token_type_ids, attention_mask) -> torch.Tensor:
        return self.sequence_summary(
            model.encoder(input_ids, token_type_ids, attention_mask)["last_hidden_state"])

    def classify(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(x)


class ElectraGeneratorPredictions(nn.Module):
    def __init__(self, config: ElectraConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.embedding_width)
        self.LayerNorm = nn.LayerNorm(config.embedding_width, eps=config.layer_norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(F.gelu(self.dense(x)))


class ElectraMaskedLMHead(BertHead, MaskedLM):
    """An ELECTRA generator's masked LM (transformers' ElectraForMaskedLM)."""

    def __init__(self, config: ElectraConfig):
        super().__init__(config)
        self.generator_predictions = ElectraGeneratorPredictions(config)
        self.generator_lm_head = TiedOutputBias(config.vocab_size)

    def predict(self, model, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(self.generator_predictions(hidden),
                        model.encoder.embeddings.word_embeddings.weight,
                        self.generator_lm_head.bias)
