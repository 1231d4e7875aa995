"""RoBERTa's encoder and heads: BERT's layers (model/bert) under embeddings whose positions
count from the padding id + 1 (as fairseq numbered them) with one token type, and heads under
transformers' names (`roberta`, `lm_head`, `classifier.dense` / `classifier.out_proj`), so a
state dict moves between bertctl and transformers' Roberta* and XLMRoberta* classes unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bertctl.model.bert.modeling import BertModel, BertWithHead
from bertctl.model.dropout import Dropout
from bertctl.model.roberta.config import RobertaConfig
from bertctl.model.roles import (MultipleChoice, QuestionAnswering, SequenceClassifier,
                                 TokenClassifier, masked_lm)
from bertctl.model.shared import DenseClassificationHead


class RobertaEmbeddings(nn.Module):
    """token + position + (the one) token type embedding, then LayerNorm and dropout. A real
    token's position is its number among the row's real tokens plus the padding id; a padding
    token's is the padding id (a row of zeros that takes no gradient)."""

    def __init__(self, config: RobertaConfig):
        super().__init__()
        self.padding_idx = config.pad_token_id
        self.longest = config.longest_input
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size,
                                            padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings,
                                                config.hidden_size,
                                                padding_idx=config.pad_token_id)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        if input_ids.size(1) > self.longest:
            raise ValueError(f"sequence length {input_ids.size(1)} exceeds the {self.longest} "
                             f"positions past the padding id")
        if position_ids is None:
            real = input_ids.ne(self.padding_idx)
            positions = real.cumsum(1).mul_(real).add_(self.padding_idx)
        else:   # a packed batch: positions restart at 0 at each sequence
            positions = position_ids + (self.padding_idx + 1)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)
        # One token type: a segment id the data builders write (a passage's 1) has no row to
        # read, and RoBERTa never saw segments.
        if token_type_ids is None or self.token_type_embeddings.num_embeddings == 1:
            x = x + self.token_type_embeddings.weight[0]
        else:
            x = x + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(x))


class RobertaModel(BertModel):
    """BERT's encoder with RoBERTa's embeddings (transformers' RobertaModel)."""

    embeddings_class = RobertaEmbeddings


class RobertaWithHead(BertWithHead):
    encoder_name = "roberta"
    encoder_class = RobertaModel


class RobertaLMHead(nn.Module):
    """dense, exact GELU, LayerNorm, then the vocabulary projection by the word embedding table
    (passed in at call time: the tie cannot break) plus the head's bias."""

    def __init__(self, config: RobertaConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        return F.linear(self.layer_norm(F.gelu(self.dense(x))), word_embeddings, self.bias)


class RobertaForMaskedLM(RobertaWithHead):
    """Masked LM alone, RoBERTa's objective: no pooler, the head at `lm_head`."""

    add_pooling_layer = False

    def __init__(self, config: RobertaConfig):
        super().__init__(config)
        self.lm_head = RobertaLMHead(config)
        self._init_head()

    def _predict(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden, self.roberta.embeddings.word_embeddings.weight)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        enc = self.roberta(input_ids, token_type_ids, attention_mask)
        out = masked_lm(self._predict, enc["last_hidden_state"], labels)
        if labels is not None:
            out["loss"] = out["mlm_loss"]
        return out


class RobertaForSequenceClassification(SequenceClassifier, RobertaWithHead):
    add_pooling_layer = False

    def __init__(self, config: RobertaConfig, num_labels: int | None = None,
                 problem_type: str = "single_label_classification",
                 features: dict[str, Any] | None = None):
        super().__init__(config, features)
        width = self.features.width if self.features is not None else config.hidden_size
        # RoBERTa has no pooler in its classifier: the dense layer is the classifier's own
        self.classifier = DenseClassificationHead(
            config, width, self._problem(num_labels, problem_type), torch.tanh)
        self._init_head()

    def _classify(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(x)


class RobertaForMultipleChoice(MultipleChoice, RobertaWithHead):
    """The pooled <s> of each choice, dropout and a linear score, as BERT's."""

    def __init__(self, config: RobertaConfig):
        super().__init__(config)
        self._add_classifier(1)

    def _pool(self, input_ids, token_type_ids, attention_mask) -> torch.Tensor:
        return self.roberta(input_ids, token_type_ids, attention_mask)["pooler_output"]


class RobertaForQuestionAnswering(QuestionAnswering, RobertaWithHead):
    add_pooling_layer = False

    def __init__(self, config: RobertaConfig):
        super().__init__(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self._init_head()

    def _span_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.qa_outputs(hidden)


class RobertaForTokenClassification(TokenClassifier, RobertaWithHead):
    add_pooling_layer = False

    def __init__(self, config: RobertaConfig, num_labels: int = 2,
                 features: dict[str, Any] | None = None):
        super().__init__(config, features)
        self.num_labels = num_labels
        self._add_classifier(num_labels)


def _xlm(cls: type) -> type:
    """transformers' XLM-RoBERTa class of the same role: the same model under its own name
    (config.json's `architectures`)."""
    return type(cls.__name__.replace("Roberta", "XLMRoberta", 1), (cls,),
                {"__module__": __name__, "__doc__": f"XLM-RoBERTa's {cls.__name__}."})


XLMRobertaModel = _xlm(RobertaModel)
XLMRobertaForMaskedLM = _xlm(RobertaForMaskedLM)
XLMRobertaForSequenceClassification = _xlm(RobertaForSequenceClassification)
XLMRobertaForMultipleChoice = _xlm(RobertaForMultipleChoice)
XLMRobertaForQuestionAnswering = _xlm(RobertaForQuestionAnswering)
XLMRobertaForTokenClassification = _xlm(RobertaForTokenClassification)
for _cls in (XLMRobertaForMaskedLM, XLMRobertaForSequenceClassification,
             XLMRobertaForMultipleChoice, XLMRobertaForQuestionAnswering,
             XLMRobertaForTokenClassification):
    _cls.encoder_class = XLMRobertaModel
