"""DistilBERT's encoder and heads under transformers' names (`distilbert.transformer.layer.2.
attention.q_lin`, `sa_layer_norm`, `ffn.lin1`, `pre_classifier`, `vocab_projector`, ...), so
a state dict moves between bertctl and transformers' DistilBert* classes unchanged. The block
is BERT's post-LN one; attention goes through the model's AttentionPolicy."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bertctl.model.attention import AttentionPolicy
from bertctl.model.distilbert.config import DistilBertConfig
from bertctl.model.dropout import Dropout
from bertctl.model.roles import (MaskedLM, MultipleChoice, QuestionAnswering, RoleHead,
                                 SequenceClassifier, TokenClassifier)
from bertctl.model.shared import ACTIVATIONS, EncoderBase, TiedOutputBias, init_normal, layer_mask


def sinusoidal_table(positions: int, dim: int) -> torch.Tensor:
    """The fixed table of `sinusoidal_pos_embds`: sin on even columns, cos on odd ones, of
    pos / 10000^(2 floor(j / 2) / dim) (Vaswani et al.)."""
    pos = torch.arange(positions, dtype=torch.float64)[:, None]
    j = torch.arange(dim, dtype=torch.float64)[None]
    angle = pos / torch.pow(10000.0, 2 * torch.div(j, 2, rounding_mode="floor") / dim)
    table = torch.empty(positions, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle[:, 0::2])
    table[:, 1::2] = torch.cos(angle[:, 1::2])
    return table.float()


class Embeddings(nn.Module):
    """word + position embeddings (no token types), LayerNorm, dropout."""

    def __init__(self, config: DistilBertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.dim,
                                            padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.dim)
        self.sinusoidal = config.sinusoidal_pos_embds
        self.LayerNorm = nn.LayerNorm(config.dim, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.dropout)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        T = input_ids.size(1)
        if T > self.position_embeddings.num_embeddings:
            raise ValueError(f"sequence length {T} exceeds max_position_embeddings "
                             f"{self.position_embeddings.num_embeddings}")
        x = self.word_embeddings(input_ids)   # DistilBERT reads no segments
        x = x + (self.position_embeddings.weight[:T] if position_ids is None
                 else self.position_embeddings(position_ids))
        return self.dropout(self.LayerNorm(x))


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, config: DistilBertConfig, policy: AttentionPolicy):
        super().__init__()
        self.policy = policy
        self.n_heads = config.n_heads
        self.q_lin, self.k_lin, self.v_lin, self.out_lin = (
            nn.Linear(config.dim, config.dim) for _ in range(4))
        self.dropout_p = config.attention_dropout

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        B, T, H = x.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(B, T, self.n_heads, H // self.n_heads).transpose(1, 2)

        q, k, v = heads(self.q_lin(x)), heads(self.k_lin(x)), heads(self.v_lin(x))
        y = self.policy.attend(q, k, v, mask, self.dropout_p if self.training else 0.0)
        return self.out_lin(y.transpose(1, 2).reshape(B, T, H))


class FFN(nn.Module):
    def __init__(self, config: DistilBertConfig):
        super().__init__()
        self.lin1 = nn.Linear(config.dim, config.hidden_dim)
        self.lin2 = nn.Linear(config.hidden_dim, config.dim)
        self.act = ACTIVATIONS[config.activation]
        self.dropout = Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.lin2(self.act(self.lin1(x))))


class TransformerBlock(nn.Module):
    def __init__(self, config: DistilBertConfig, policy: AttentionPolicy):
        super().__init__()
        self.attention = MultiHeadSelfAttention(config, policy)
        self.sa_layer_norm = nn.LayerNorm(config.dim, eps=config.layer_norm_eps)
        self.ffn = FFN(config)
        self.output_layer_norm = nn.LayerNorm(config.dim, eps=config.layer_norm_eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        x = self.sa_layer_norm(self.attention(x, mask) + x)
        return self.output_layer_norm(self.ffn(x) + x)


class Transformer(nn.Module):
    def __init__(self, config: DistilBertConfig, policy: AttentionPolicy):
        super().__init__()
        self.layer = nn.ModuleList(TransformerBlock(config, policy)
                                   for _ in range(config.n_layers))


class DistilBertModel(EncoderBase):
    """forward(input_ids, token_type_ids=None (read by none), attention_mask=None,
    output_hidden_states=False, num_layers=None, position_ids=None)."""

    LAYERS = "transformer.layer"

    def __init__(self, config: DistilBertConfig):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.attention_policy = AttentionPolicy()
        self.transformer = Transformer(config, self.attention_policy)
        self.apply(lambda m: init_normal(m, config.initializer_range))
        if config.sinusoidal_pos_embds:   # fixed, as transformers keeps them
            with torch.no_grad():
                self.embeddings.position_embeddings.weight.copy_(
                    sinusoidal_table(config.max_position_embeddings, config.dim))
            self.embeddings.position_embeddings.weight.requires_grad_(False)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None,
                output_hidden_states: bool = False, num_layers: int | None = None,
                position_ids: torch.Tensor | None = None, **_: Any) -> dict[str, Any]:
        mask = layer_mask(self.attention_policy, attention_mask, position_ids is not None,
                          input_ids)
        states = self.run_layers(self.embeddings(input_ids, None, position_ids), num_layers, mask)
        return {"last_hidden_state": states[-1],
                **({"hidden_states": tuple(states)} if output_hidden_states else {})}

# ---------------------------------------------------------------------------------------------
# Heads


class DistilBertHead(RoleHead):
    def init_module(self, module: nn.Module) -> None:
        init_normal(module, self.config.initializer_range)


class DistilBertPreClassified(DistilBertHead):
    """pre_classifier, ReLU, dropout, classifier on the first token (sequence classification,
    multiple choice)."""

    def add_pre_classifier(self, width: int, num_outputs: int) -> None:
        self.pre_classifier = nn.Linear(width, self.config.dim)
        self.classifier = nn.Linear(self.config.dim, num_outputs)
        self.dropout = Dropout(self.config.seq_classif_dropout)

    def classify(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(F.relu(self.pre_classifier(x))))


class DistilBertSequenceClassificationHead(DistilBertPreClassified, SequenceClassifier):
    def __init__(self, config: DistilBertConfig, num_labels: int | None = None,
                 problem_type: str = "single_label_classification", features=None):
        super().__init__(config)
        self.add_pre_classifier(self.width(features), self.problem(num_labels, problem_type))


class DistilBertMultipleChoiceHead(DistilBertPreClassified, MultipleChoice):
    def __init__(self, config: DistilBertConfig):
        super().__init__(config)
        self.add_pre_classifier(config.dim, 1)


class DistilBertQuestionAnsweringHead(DistilBertHead, QuestionAnswering):
    def __init__(self, config: DistilBertConfig):
        super().__init__(config)
        self.qa_outputs = nn.Linear(config.dim, 2)
        self.dropout = Dropout(config.qa_dropout)

    def span_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.qa_outputs(self.dropout(hidden))


class DistilBertTokenClassificationHead(DistilBertHead, TokenClassifier):
    def __init__(self, config: DistilBertConfig, num_labels: int = 2, features=None):
        super().__init__(config)
        self.num_labels = num_labels
        self.dropout = Dropout(config.dropout)
        self.classifier = nn.Linear(self.width(features), num_labels)

    def classify(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(x))


class DistilBertMaskedLMHead(DistilBertHead, MaskedLM):
    def __init__(self, config: DistilBertConfig):
        super().__init__(config)
        self.vocab_transform = nn.Linear(config.dim, config.dim)
        self.act = ACTIVATIONS[config.activation]
        self.vocab_layer_norm = nn.LayerNorm(config.dim, eps=config.layer_norm_eps)
        self.vocab_projector = TiedOutputBias(config.vocab_size)

    def predict(self, model, hidden: torch.Tensor) -> torch.Tensor:
        x = self.vocab_layer_norm(self.act(self.vocab_transform(hidden)))
        return F.linear(x, model.encoder.embeddings.word_embeddings.weight,
                        self.vocab_projector.bias)
