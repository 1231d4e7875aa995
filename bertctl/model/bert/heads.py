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

from bertctl.model.bert.config import BertConfig
from bertctl.model.bert.encoder import BertModel, init_bert_weights
from bertctl.model.dropout import Dropout
from bertctl.model.shared import ACTIVATIONS, EncoderWithHead, first_tokens
from bertctl.model.roles import (MultipleChoice, QuestionAnswering,
                                 SequenceClassifier, TokenClassifier, masked_lm)





class BertWithHead(EncoderWithHead):
    """BERT's encoder at `bert` plus a head."""

    add_pooling_layer = True
    encoder_class: type[nn.Module] = BertModel   # an architecture on BERT's blocks sets its own

    def _build_encoder(self, config: BertConfig) -> nn.Module:
        return self.encoder_class(config, add_pooling_layer=self.add_pooling_layer)

    def _init_module(self, module: nn.Module) -> None:
        init_bert_weights(module, self.config.initializer_range)

    def _add_classifier(self, num_outputs: int) -> None:
        """HF's classifier head: `dropout` (classifier_dropout, else the hidden dropout) then a
        linear `classifier`, initialised; the names match HF's weights."""
        p = self.config.classifier_dropout
        self.dropout = Dropout(self.config.hidden_dropout_prob if p is None else p)
        width = self.features.width if self.features is not None else self.config.hidden_size
        self.classifier = nn.Linear(width, num_outputs)
        self._init_head()

    def _classify(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(x))


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


class BertMaskedLMHead(BertWithHead):
    """A head at `cls` whose `predictions` is BERT's masked-LM head."""

    def _predict(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.cls.predictions(hidden, self.bert.embeddings.word_embeddings.weight)


class BertForPreTraining(BertMaskedLMHead):
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
        out = masked_lm(self._predict, enc["last_hidden_state"], labels)
        out["nsp_logits"] = self.cls.seq_relationship(enc["pooler_output"])
        losses = [out["mlm_loss"]] if labels is not None else []
        if next_sentence_label is not None:
            out["nsp_loss"] = F.cross_entropy(out["nsp_logits"].float(), next_sentence_label.reshape(-1))
            losses.append(out["nsp_loss"])
        if losses:
            out["loss"] = sum(losses[1:], losses[0])
        return out


class BertOnlyMLMHead(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.predictions = BertLMPredictionHead(config)


class BertForMaskedLM(BertMaskedLMHead):
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
        out = masked_lm(self._predict, enc["last_hidden_state"], labels)
        if labels is not None:
            out["loss"] = out["mlm_loss"]
        return out


# ---------------------------------------------------------------------------------------------
# Fine-tuning


class BertForSequenceClassification(SequenceClassifier, BertWithHead):
    """Dropout + linear on the pooled [CLS]."""

    def __init__(self, config: BertConfig, num_labels: int | None = None,
                 problem_type: str = "single_label_classification",
                 features: dict[str, Any] | None = None):
        super().__init__(config, features)
        self._add_classifier(self._problem(num_labels, problem_type))

    def _pool(self, input_ids, token_type_ids, attention_mask, position_ids=None,
              sequence_starts=None) -> torch.Tensor:
        if self.features is not None:   # feature-based: the combined [CLS] vector
            return first_tokens(self._sequence(input_ids, token_type_ids, attention_mask,
                                               position_ids), sequence_starts)
        return self.bert(input_ids, token_type_ids, attention_mask, position_ids=position_ids,
                         sequence_starts=sequence_starts)["pooler_output"]


class BertForMultipleChoice(MultipleChoice, BertWithHead):
    def __init__(self, config: BertConfig):
        super().__init__(config)
        self._add_classifier(1)

    def _pool(self, input_ids, token_type_ids, attention_mask) -> torch.Tensor:
        return self.bert(input_ids, token_type_ids, attention_mask)["pooler_output"]


class BertForQuestionAnswering(QuestionAnswering, BertWithHead):
    add_pooling_layer = False

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self._init_head()

    def _span_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.qa_outputs(hidden)


class BertForTokenClassification(TokenClassifier, BertWithHead):
    add_pooling_layer = False

    def __init__(self, config: BertConfig, num_labels: int = 2,
                 features: dict[str, Any] | None = None):
        super().__init__(config, features)
        self.num_labels = num_labels
        self._add_classifier(num_labels)
