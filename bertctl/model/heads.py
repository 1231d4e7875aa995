"""Task heads on the shared encoder: pretraining (MLM + NSP) and the fine-tuning families.

Each model keeps the encoder at `bert` and names its head as Hugging Face does (`cls.*`,
`classifier`, `qa_outputs`), so state dicts and config.json `architectures` match HF's classes
of the same name. Every forward returns a dict with "loss" only when labels were given.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from bertctl.model.bert import BertModel, first_tokens, init_bert_weights
from bertctl.model.config import ACTIVATIONS, BertConfig
from bertctl.model.dropout import Dropout
from bertctl.model.features import FrozenFeatures
from bertctl.model.roles import (Embedder, MultipleChoice, QuestionAnswering,
                                 SequenceClassifier, TokenClassifier, masked_lm)



class EncoderWithHead(nn.Module):
    """An encoder plus a head, for any architecture: the encoder sits at `encoder_name` (BERT's
    `bert`, ModernBERT's `model`, as transformers names them); subclasses build the head and
    call `_init_head()`."""

    encoder_name: ClassVar[str] = "bert"
    supports_packing = False   # see `packs`
    input_rank = 2   # (batch, sequence) inputs; multiple choice: (batch, choices, sequence)

    def __init__(self, config, features: dict[str, Any] | None = None):
        super().__init__()
        self.config = config
        setattr(self, self.encoder_name, self._build_encoder(config))
        # Feature-based use (the paper's ELMo-style ablation): the encoder frozen, the head
        # trained on its combined hidden states. Heads that support it pass `features`.
        self.features = None
        if features is not None:
            self.features = FrozenFeatures(config.hidden_size, **features)
            self.encoder.requires_grad_(False)

    @property
    def encoder(self) -> nn.Module:
        return getattr(self, self.encoder_name)

    def _build_encoder(self, config) -> nn.Module:
        raise NotImplementedError

    def _init_module(self, module: nn.Module) -> None:
        """Initialise one of the head's modules as the architecture does."""
        raise NotImplementedError

    def train(self, mode: bool = True):
        super().train(mode)
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
        return self.supports_packing and (self.features is None or self.features.lstm is None)

    def _sequence(self, input_ids, token_type_ids, attention_mask,
                  position_ids=None) -> torch.Tensor:
        """(B, T, width): the last hidden state, or the frozen encoder's features."""
        if self.features is not None:
            return self.features(self.encoder, input_ids, token_type_ids, attention_mask,
                                 position_ids)
        return self.encoder(input_ids, token_type_ids, attention_mask,
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
            if name != self.encoder_name:
                child.apply(self._init_module)

    def hf_config(self) -> dict[str, Any]:
        """Keys this head adds to config.json (num_labels, problem_type, ...)."""
        return {}

    @classmethod
    def kwargs_from_hf(cls, hf_config: dict[str, Any]) -> dict[str, Any]:
        """Constructor arguments recovered from a config.json this head wrote."""
        return {}

    def extra_files(self) -> dict[str, str]:
        """Files written beside config.json (path relative to the model directory -> text):
        another library's layout of the same model (sentence-transformers' modules)."""
        return {}


class BertWithHead(EncoderWithHead):
    """BERT's encoder at `bert` plus a head."""

    add_pooling_layer = True

    def _build_encoder(self, config: BertConfig) -> nn.Module:
        return BertModel(config, add_pooling_layer=self.add_pooling_layer)

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


class BertForEmbedding(Embedder, BertWithHead):
    """The encoder's pooled last hidden states as the vector; no weights of its own."""

    add_pooling_layer = False

    def __init__(self, config: BertConfig, **embedding):
        super().__init__(config)
        self._embedder(**embedding)


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
