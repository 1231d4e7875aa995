"""RoBERTa's encoder and heads: BERT's layers (model/bert) under embeddings whose positions
count from the padding id + 1 (as fairseq numbered them) with one token type, and heads under
transformers' names (`roberta`, `lm_head`, `classifier.dense` / `classifier.out_proj`), so a
state dict moves between bertctl and transformers' Roberta* and XLMRoberta* classes unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bertctl.model.bert.modeling import (BertDenseClassifierHead, BertHead, BertModel,
                                         BertMultipleChoiceHead, BertQuestionAnsweringHead,
                                         BertTokenClassificationHead)
from bertctl.model.dropout import Dropout
from bertctl.model.roberta.config import RobertaConfig
from bertctl.model.roles import MaskedLM


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


class RobertaMaskedLMHead(BertHead, MaskedLM):
    """Masked LM alone, RoBERTa's objective: no pooler, the head at `lm_head`."""

    def __init__(self, config: RobertaConfig):
        super().__init__(config)
        self.lm_head = RobertaLMHead(config)

    def predict(self, model, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden, model.encoder.embeddings.word_embeddings.weight)


# The classifier has no pooler: its dense layer is its own (tanh); multiple choice reads the
# pooled <s> as BERT's does; span QA and tagging are BERT's.
RobertaSequenceClassificationHead = BertDenseClassifierHead
RobertaMultipleChoiceHead = BertMultipleChoiceHead
RobertaQuestionAnsweringHead = BertQuestionAnsweringHead
RobertaTokenClassificationHead = BertTokenClassificationHead

XLMRobertaModel = type("XLMRobertaModel", (RobertaModel,),
                       {"__module__": __name__, "__doc__": "XLM-RoBERTa's RobertaModel."})
