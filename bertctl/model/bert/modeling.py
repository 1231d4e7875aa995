"""BERT (Devlin et al., 2018): the encoder, then its heads (pretraining's masked LM and next
sentence, and the fine-tuning roles), in one file that reads top to bottom.

Module and parameter names follow transformers' `BertModel` and `BertFor*` exactly
(`embeddings.LayerNorm`, `encoder.layer.3.attention.self.query`, `cls.*`, `classifier`,
`qa_outputs`), so a state dict moves between the two with no renaming, any transformers BERT
checkpoint is also ours, and config.json's `architectures` names transformers' class of the
same name. Everything else is written for speed and clarity: attention goes through the
model's `AttentionPolicy` (model/attention.py), position and segment embeddings are added
without building index tensors, and there is no decoder/cache machinery. Every forward returns
a dict, with "loss" only when labels were given.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bertctl.model.attention import AttentionPolicy
from bertctl.model.bert.config import BertConfig
from bertctl.model.dropout import Dropout
from bertctl.model.roles import (MaskedLM, MultipleChoice, QuestionAnswering, RoleHead,
                                 SequenceClassifier, TokenClassifier, masked_lm)
from bertctl.model.shared import (ACTIVATIONS, DenseClassificationHead, EncoderBase,
                                  Intermediate, ProjectAddNorm, first_tokens, init_normal,
                                  layer_mask)


# ---------------------------------------------------------------------------------------------
# Building blocks


class BertEmbeddings(nn.Module):
    """token + segment + learned position embedding, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig):
        super().__init__()
        # padding_idx as in HF: the [PAD] row starts at zero and gets no gradient from lookups.
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size,
                                            padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        seq_len = input_ids.size(1)
        if seq_len > self.position_embeddings.num_embeddings:
            raise ValueError(f"sequence length {seq_len} exceeds max_position_embeddings "
                             f"{self.position_embeddings.num_embeddings}")
        x = self.word_embeddings(input_ids)
        if position_ids is None:
            # Positions 0..T-1: slicing the table is a lookup without an index tensor.
            x = x + self.position_embeddings.weight[:seq_len]
        else:  # a packed batch: positions restart at each sequence
            x = x + self.position_embeddings(position_ids)
        if token_type_ids is None:
            x = x + self.token_type_embeddings.weight[0]
        else:
            x = x + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    """Multi-head scaled dot-product attention (the projections only; HF's `attention.self`)."""

    def __init__(self, config: BertConfig, policy: AttentionPolicy):
        super().__init__()
        self.policy = policy   # the model's (BertModel.attention_policy), shared by its layers
        self.num_heads = config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_p = config.attention_probs_dropout_prob

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        B, T, H = x.shape

        def heads(t: torch.Tensor) -> torch.Tensor:  # (B, T, H) -> (B, heads, T, head_size)
            return t.view(B, T, self.num_heads, H // self.num_heads).transpose(1, 2)

        q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
        y = self.policy.attend(q, k, v, mask, self.dropout_p if self.training else 0.0)
        return y.transpose(1, 2).reshape(B, T, H)


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig, policy: AttentionPolicy):
        super().__init__()
        self.self = BertSelfAttention(config, policy)
        self.output = ProjectAddNorm(config.hidden_size, config)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return self.output(self.self(x, mask), x)


class BertLayer(nn.Module):
    def __init__(self, config: BertConfig, policy: AttentionPolicy):
        super().__init__()
        self.attention = BertAttention(config, policy)
        self.intermediate = Intermediate(config)
        self.output = ProjectAddNorm(config.intermediate_size, config)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        x = self.attention(x, mask)
        return self.output(self.intermediate(x), x)


class BertEncoder(nn.Module):
    def __init__(self, config: BertConfig, policy: AttentionPolicy):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config, policy)
                                   for _ in range(config.num_hidden_layers))


class BertPooler(nn.Module):
    """tanh(W h_[CLS] + b): the sentence vector NSP and the sentence-level heads read."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, first: torch.Tensor) -> torch.Tensor:
        """`first`: the [CLS] hidden states, (N, H)."""
        return torch.tanh(self.dense(first))




# ---------------------------------------------------------------------------------------------
# The model


# BERT's initialisation (model/shared.py's, which the others share).
init_bert_weights = init_normal


class BertModel(EncoderBase):
    """Embeddings, `num_hidden_layers` post-LN encoder blocks and (optionally) the pooler.

    forward(input_ids, token_type_ids=None, attention_mask=None, output_hidden_states=False)
    returns {"last_hidden_state": (B, T, H), "pooler_output": (B, H) or None,
             "hidden_states": tuple of L + 1 tensors (embeddings first), if asked}.

    A packed batch (several sequences per row, `data.collate.pack_batch`) also passes
    `position_ids` (restarting at each sequence) and, for the pooler, `sequence_starts`: the
    flat (row * T + column) index of each sequence's [CLS], in the order of its labels; its
    pooler_output is then (number of sequences, H).
    """

    # An architecture built on BERT's blocks with embeddings of its own (RoBERTa's) sets this.
    embeddings_class: type[nn.Module] = BertEmbeddings

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True):
        super().__init__()
        self.config = config
        self.embeddings = self.embeddings_class(config)
        # How its attention is computed (the training loop's --attention sets it).
        self.attention_policy = AttentionPolicy()
        self.encoder = BertEncoder(config, self.attention_policy)
        # HF's token-classification and QA models have no pooler; matching that keeps their
        # checkpoints free of unused weights.
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self.apply(lambda m: init_bert_weights(m, config.initializer_range))

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None,
                output_hidden_states: bool = False,
                num_layers: int | None = None,
                position_ids: torch.Tensor | None = None,
                sequence_starts: torch.Tensor | None = None) -> dict[str, Any]:
        """`num_layers`: run only the first layers (features from a lower layer need no more;
        the outputs then stop at that layer and there is no pooler output)."""
        mask = layer_mask(self.attention_policy, attention_mask, position_ids is not None,
                          input_ids)
        states = self.run_layers(self.embed(input_ids, token_type_ids, position_ids), num_layers,
                                 mask)
        x = states[-1]
        pool = self.pooler is not None and num_layers is None
        return {
            "last_hidden_state": x,
            "pooler_output": self.pooler(first_tokens(x, sequence_starts)) if pool else None,
            **({"hidden_states": tuple(states)} if output_hidden_states else {}),
        }

    def embed(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None,
              position_ids: torch.Tensor | None) -> torch.Tensor:
        """Hidden state 0 (ELECTRA's projects its narrower embeddings to the width)."""
        return self.embeddings(input_ids, token_type_ids, position_ids)


# ---------------------------------------------------------------------------------------------
# Heads: each role's (roles.py) with BERT's modules under transformers' names; RoBERTa and
# ELECTRA take those that are the same for them.


class BertHead(RoleHead):
    """BERT's heads initialise as its encoder does, and have no pooler unless they read it."""

    encoder_pooler = False

    def init_module(self, module: nn.Module) -> None:
        init_bert_weights(module, self.config.initializer_range)


class BertClassifier(BertHead):
    """transformers' classifier: `dropout` (classifier_dropout, else the hidden dropout), then
    a linear `classifier`."""

    def add_classifier(self, width: int, num_outputs: int) -> None:
        p = self.config.classifier_dropout
        self.dropout = Dropout(self.config.hidden_dropout_prob if p is None else p)
        self.classifier = nn.Linear(width, num_outputs)

    def classify(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(x))


class BertPooledClassifier(BertClassifier):
    """The classifier on the pooler's output ([CLS], dense, tanh); a frozen encoder's is the
    combined [CLS] vector."""

    encoder_pooler = True

    def pool(self, model, input_ids, token_type_ids, attention_mask, position_ids=None,
             sequence_starts=None) -> torch.Tensor:
        if model.features is not None:
            return first_tokens(model.sequence(input_ids, token_type_ids, attention_mask,
                                               position_ids), sequence_starts)
        return model.encoder(input_ids, token_type_ids, attention_mask,
                             position_ids=position_ids,
                             sequence_starts=sequence_starts)["pooler_output"]


class BertSequenceClassificationHead(BertPooledClassifier, SequenceClassifier):
    def __init__(self, config: BertConfig, num_labels: int | None = None,
                 problem_type: str = "single_label_classification", features=None):
        super().__init__(config)
        self.add_classifier(self.width(features), self.problem(num_labels, problem_type))


class BertMultipleChoiceHead(BertPooledClassifier, MultipleChoice):
    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.add_classifier(config.hidden_size, 1)


class BertQuestionAnsweringHead(BertHead, QuestionAnswering):
    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)


class BertTokenClassificationHead(BertClassifier, TokenClassifier):
    def __init__(self, config: BertConfig, num_labels: int = 2, features=None):
        super().__init__(config)
        self.num_labels = num_labels
        self.add_classifier(self.width(features), num_labels)


class BertDenseClassifierHead(BertHead, SequenceClassifier):
    """A sequence classifier with a dense layer of its own on the first token (RoBERTa's and
    ELECTRA's, where BERT's reads the pooler), with their `activation`."""

    activation = staticmethod(torch.tanh)

    def __init__(self, config: BertConfig, num_labels: int | None = None,
                 problem_type: str = "single_label_classification", features=None):
        super().__init__(config)
        self.classifier = DenseClassificationHead(
            config, self.width(features), self.problem(num_labels, problem_type),
            self.activation)

    def classify(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(x)


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


class BertOnlyMLMHead(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.predictions = BertLMPredictionHead(config)


class BertPredicting(BertHead, MaskedLM):
    """A masked LM at `cls.predictions`, its decoder the word embedding table."""

    def predict(self, model, hidden: torch.Tensor) -> torch.Tensor:
        return self.cls.predictions(hidden, model.encoder.embeddings.word_embeddings.weight)


class BertMaskedLMHead(BertPredicting):
    """Masked LM alone (RoBERTa's objective), as transformers' BertForMaskedLM: no pooler."""

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.cls = BertOnlyMLMHead(config)


class BertPreTrainingHead(BertPredicting):
    """Masked LM + next-sentence prediction (on the pooler's output), BERT's two pretraining
    tasks. `next_sentence_label=None` trains MLM only (data built without NSP)."""

    encoder_pooler = True

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.cls = BertPreTrainingHeads(config)

    def forward(self, model, input_ids: torch.Tensor,
                token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                next_sentence_label: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        enc = model.encoder(input_ids, token_type_ids, attention_mask)
        out = masked_lm(lambda h: self.predict(model, h), enc["last_hidden_state"], labels)
        out["nsp_logits"] = self.cls.seq_relationship(enc["pooler_output"])
        losses = [out["mlm_loss"]] if labels is not None else []
        if next_sentence_label is not None:
            out["nsp_loss"] = F.cross_entropy(out["nsp_logits"].float(),
                                              next_sentence_label.reshape(-1))
            losses.append(out["nsp_loss"])
        if losses:
            out["loss"] = sum(losses[1:], losses[0])
        return out
