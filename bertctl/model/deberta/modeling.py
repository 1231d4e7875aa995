"""DeBERTa-v2's encoder and heads under transformers' names (`deberta.encoder.layer.3.attention.
self.query_proj`, `encoder.rel_embeddings`, `pooler.dense`, ...), so a state dict moves between
bertctl and transformers' DebertaV2* classes unchanged.

Attention is disentangled: beside content with content (q k^T), each token's content with the
relative position of the other (c2p: q against the keys' projection of the distance's
embedding) and the other's content with that distance (p2c), all scaled by sqrt(head size x
the number of terms). Distances beyond half the buckets grow logarithmically (log buckets).
The relative terms enter attention as an additive bias, through the model's AttentionPolicy
(the fused kernel with the bias as its float mask, or the product written out: in bf16
training with the bias the written form was 2.8x faster on an AMX Xeon, and auto times it).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bertctl.model.attention import AttentionPolicy, written_attention
from bertctl.model.deberta.config import DebertaV2Config
from bertctl.model.dropout import Dropout, dropout
from bertctl.model.roles import (MaskedLM, MultipleChoice, QuestionAnswering, RoleHead,
                                 SequenceClassifier, TokenClassifier)
from bertctl.model.shared import (ACTIVATIONS, EncoderBase, Intermediate, ProjectAddNorm,
                                  attention_bias, first_tokens, init_normal)


def relative_positions(length: int, buckets: int, max_distance: int,
                       device: torch.device) -> torch.Tensor:
    """(T, T) query - key distances, log-bucketed past half the buckets (DeBERTa-v2's
    make_log_bucket_position): within `mid` of zero a distance is itself; past it, mid plus
    ceil(log(|d| / mid) / log((max_distance - 1) / mid) * (mid - 1)), with its sign."""
    ids = torch.arange(length, device=device)
    rel = ids[:, None] - ids[None, :]
    if buckets <= 0 or max_distance <= 0:
        return rel
    mid = buckets // 2
    sign = torch.sign(rel)
    far = torch.where((rel < mid) & (rel > -mid), mid - 1, rel.abs())
    log_pos = torch.ceil(torch.log(far / mid) / math.log((max_distance - 1) / mid)
                         * (mid - 1)) + mid
    return torch.where(far <= mid, rel.to(log_pos.dtype), log_pos * sign).long()


class DebertaV2Embeddings(nn.Module):
    """word (+ absolute position, + token type where the config has them) embeddings, the
    projection to the hidden width where the embeddings are narrower, LayerNorm, padding
    positions zeroed, dropout."""

    def __init__(self, config: DebertaV2Config):
        super().__init__()
        width = config.embedding_size or config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, width,
                                            padding_idx=config.pad_token_id)
        self.position_embeddings = (nn.Embedding(config.max_position_embeddings, width)
                                    if config.position_biased_input else None)
        self.token_type_embeddings = (nn.Embedding(config.type_vocab_size, width)
                                      if config.type_vocab_size > 0 else None)
        self.embed_proj = (nn.Linear(width, config.hidden_size, bias=False)
                           if width != config.hidden_size else None)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.longest = config.max_position_embeddings

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None,
                attention_mask: torch.Tensor | None,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        T = input_ids.size(1)
        if T > self.longest:
            raise ValueError(f"sequence length {T} exceeds max_position_embeddings "
                             f"{self.longest}")
        x = self.word_embeddings(input_ids)
        if self.position_embeddings is not None:
            x = x + (self.position_embeddings.weight[:T] if position_ids is None
                     else self.position_embeddings(position_ids))
        if self.token_type_embeddings is not None:
            x = x + (self.token_type_embeddings.weight[0] if token_type_ids is None
                     else self.token_type_embeddings(token_type_ids))
        if self.embed_proj is not None:
            x = self.embed_proj(x)
        x = self.LayerNorm(x)
        if attention_mask is not None:   # a packed row's mask numbers its sequences: > 0
            x = x * (attention_mask > 0).unsqueeze(-1).to(x.dtype)
        return self.dropout(x)


class DisentangledSelfAttention(nn.Module):
    def __init__(self, config: DebertaV2Config, policy: AttentionPolicy):
        super().__init__()
        self.policy = policy   # the model's, shared by its layers
        H = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.query_proj = nn.Linear(H, H)
        self.key_proj = nn.Linear(H, H)
        self.value_proj = nn.Linear(H, H)
        self.terms = tuple(t for t in ("c2p", "p2c") if t in config.pos_att_type) \
            if config.relative_attention else ()
        if config.relative_attention and not config.share_att_key:
            if "c2p" in self.terms:
                self.pos_key_proj = nn.Linear(H, H)
            if "p2c" in self.terms:
                self.pos_query_proj = nn.Linear(H, H)
        self.share = config.share_att_key
        self.span = config.relative_span
        self.pos_dropout_p = config.hidden_dropout_prob
        self.dropout_p = config.attention_probs_dropout_prob

    def _heads(self, t: torch.Tensor) -> torch.Tensor:   # (..., T, H) -> (..., heads, T, d)
        return t.unflatten(-1, (self.num_heads, -1)).transpose(-3, -2)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor | None,
                relative: tuple[torch.Tensor, torch.Tensor] | None,
                rel_embeddings: torch.Tensor | None) -> torch.Tensor:
        """`relative`: the (T, T) rows of the distance table c2p and p2c read (their
        clamped bucket indices); `rel_embeddings` the table."""
        B, T, H = x.shape
        q, k, v = (self._heads(p(x)) for p in (self.query_proj, self.key_proj, self.value_proj))
        scale = (q.size(-1) * (1 + len(self.terms))) ** -0.5
        bias = None
        if self.terms:
            rel = dropout(rel_embeddings, self.pos_dropout_p, self.training)
            c2p_index, p2c_index = (i.expand(B, self.num_heads, T, T) for i in relative)
            terms = []
            if "c2p" in self.terms:
                pos_key = self._heads((self.key_proj if self.share else self.pos_key_proj)(rel))
                c2p = torch.matmul(q, pos_key.transpose(-1, -2))   # (B, heads, T, 2 span)
                terms.append(c2p.gather(-1, c2p_index))
            if "p2c" in self.terms:
                pos_query = self._heads((self.query_proj if self.share
                                         else self.pos_query_proj)(rel))
                p2c = torch.matmul(k, pos_query.transpose(-1, -2))
                terms.append(p2c.gather(-1, p2c_index).transpose(-1, -2))
            # in place: a gather's backward keeps only its index
            bias = terms[0] if len(terms) == 1 else terms[0].add_(terms[1])
            bias = bias.mul_(scale)
        if torch.compiler.is_exporting() and bias is not None:
            # Written out for the ONNX exporter, whose decomposition of the fused kernel with
            # a float mask gives strides its own reshape then misreads (torch 2.13).
            y = written_attention(q, k, v, allowed, 0.0, bias, scale)
        else:
            y = self.policy.attend(q, k, v, allowed, self.dropout_p if self.training else 0.0,
                                   bias, scale)
        return y.transpose(1, 2).reshape(B, T, H)


class DebertaV2Attention(nn.Module):
    def __init__(self, config: DebertaV2Config, policy: AttentionPolicy):
        super().__init__()
        self.self = DisentangledSelfAttention(config, policy)
        self.output = ProjectAddNorm(config.hidden_size, config)


class DebertaV2Layer(nn.Module):
    def __init__(self, config: DebertaV2Config, policy: AttentionPolicy):
        super().__init__()
        self.attention = DebertaV2Attention(config, policy)
        self.intermediate = Intermediate(config)
        self.output = ProjectAddNorm(config.intermediate_size, config)

    def forward(self, x, allowed, relative, rel_embeddings):
        x = self.attention.output(self.attention.self(x, allowed, relative, rel_embeddings), x)
        return self.output(self.intermediate(x), x)


class DebertaV2Encoder(nn.Module):
    """The layers, and the relative distances' embeddings they share (LayerNormed where the
    config says, as v3's)."""

    def __init__(self, config: DebertaV2Config, policy: AttentionPolicy):
        super().__init__()
        self.layer = nn.ModuleList(DebertaV2Layer(config, policy)
                                   for _ in range(config.num_hidden_layers))
        if config.relative_attention:
            self.rel_embeddings = nn.Embedding(2 * config.relative_span, config.hidden_size)
            if config.norm_rel_ebd == "layer_norm":
                self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def relative_table(self) -> torch.Tensor | None:
        if not hasattr(self, "rel_embeddings"):
            return None
        table = self.rel_embeddings.weight
        return self.LayerNorm(table) if hasattr(self, "LayerNorm") else table


class DebertaV2Model(EncoderBase):
    """forward(input_ids, token_type_ids=None, attention_mask=None, output_hidden_states=False,
    num_layers=None, position_ids=None) -> {"last_hidden_state", "hidden_states" if asked}.
    A packed batch (`data.collate.pack_batch`) passes its sequences' numbers as the mask:
    relative distances within a sequence are those it has alone."""

    def __init__(self, config: DebertaV2Config):
        super().__init__()
        self.config = config
        self.embeddings = DebertaV2Embeddings(config)
        # The training loop's --attention sets it; its additive bias rules varlen out.
        self.attention_policy = AttentionPolicy(varlen=False)
        self.encoder = DebertaV2Encoder(config, self.attention_policy)
        self.apply(lambda m: init_normal(m, config.initializer_range))

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None,
                output_hidden_states: bool = False, num_layers: int | None = None,
                position_ids: torch.Tensor | None = None, **_: Any) -> dict[str, Any]:
        allowed = attention_bias(attention_mask, packed=position_ids is not None)
        x = self.embeddings(input_ids, token_type_ids, attention_mask, position_ids)
        config = self.config
        relative = None
        if config.relative_attention:
            # Each term's table index of every (query, key) pair, once for all layers.
            distance = relative_positions(input_ids.size(1), config.position_buckets,
                                          config.max_distance, input_ids.device)
            span = config.relative_span
            relative = ((distance + span).clamp(0, 2 * span - 1),
                        (span - distance).clamp(0, 2 * span - 1))
        states = self.run_layers(x, num_layers, allowed, relative, self.encoder.relative_table())
        return {"last_hidden_state": states[-1],
                **({"hidden_states": tuple(states)} if output_hidden_states else {})}

# ---------------------------------------------------------------------------------------------
# Heads


class ContextPooler(nn.Module):
    """The first token's state: dropout, dense, the pooler's activation."""

    def __init__(self, config: DebertaV2Config, width: int):
        super().__init__()
        self.dense = nn.Linear(width, config.hidden_size)
        self.dropout = Dropout(config.pooler_dropout)
        self.act = ACTIVATIONS[config.pooler_hidden_act]

    def forward(self, first: torch.Tensor) -> torch.Tensor:
        return self.act(self.dense(self.dropout(first)))


class DebertaV2Head(RoleHead):
    def init_module(self, module: nn.Module) -> None:
        init_normal(module, self.config.initializer_range)


class DebertaV2Pooled(DebertaV2Head):
    """A classifier on the pooled first token (sequence classification, multiple choice)."""

    def add_pooled_classifier(self, width: int, num_outputs: int) -> None:
        self.pooler = ContextPooler(self.config, width)
        p = self.config.cls_dropout
        self.dropout = Dropout(self.config.hidden_dropout_prob if p is None else p)
        self.classifier = nn.Linear(self.config.hidden_size, num_outputs)

    def pool(self, model, input_ids, token_type_ids, attention_mask, position_ids=None,
             sequence_starts=None) -> torch.Tensor:
        hidden = model.sequence(input_ids, token_type_ids, attention_mask, position_ids)
        return self.pooler(first_tokens(hidden, sequence_starts))

    def classify(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(x))


class DebertaV2SequenceClassificationHead(DebertaV2Pooled, SequenceClassifier):
    def __init__(self, config: DebertaV2Config, num_labels: int | None = None,
                 problem_type: str = "single_label_classification", features=None):
        super().__init__(config)
        self.add_pooled_classifier(self.width(features), self.problem(num_labels, problem_type))


class DebertaV2MultipleChoiceHead(DebertaV2Pooled, MultipleChoice):
    def __init__(self, config: DebertaV2Config):
        super().__init__(config)
        self.add_pooled_classifier(config.hidden_size, 1)


class DebertaV2QuestionAnsweringHead(DebertaV2Head, QuestionAnswering):
    def __init__(self, config: DebertaV2Config):
        super().__init__(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)


class DebertaV2TokenClassificationHead(DebertaV2Head, TokenClassifier):
    def __init__(self, config: DebertaV2Config, num_labels: int = 2, features=None):
        super().__init__(config)
        self.num_labels = num_labels
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(self.width(features), num_labels)

    def classify(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(x))


class DebertaV2PredictionHeadTransform(nn.Module):
    def __init__(self, config: DebertaV2Config):
        super().__init__()
        width = config.embedding_size or config.hidden_size
        self.dense = nn.Linear(config.hidden_size, width)
        self.act = ACTIVATIONS[config.hidden_act]
        self.LayerNorm = nn.LayerNorm(width, eps=config.layer_norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.act(self.dense(x)))


class DebertaV2LMPredictionHead(nn.Module):
    """transformers' (legacy) masked-LM head at cls.predictions: transform, then the word
    embedding table (passed in: the tie cannot break) and the head's bias."""

    def __init__(self, config: DebertaV2Config):
        super().__init__()
        self.transform = DebertaV2PredictionHeadTransform(config)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        return F.linear(self.transform(x), word_embeddings, self.bias)


class DebertaV2OnlyMLMHead(nn.Module):
    def __init__(self, config: DebertaV2Config):
        super().__init__()
        self.predictions = DebertaV2LMPredictionHead(config)


class DebertaV2MaskedLMHead(DebertaV2Head, MaskedLM):
    def __init__(self, config: DebertaV2Config):
        super().__init__(config)
        self.cls = DebertaV2OnlyMLMHead(config)

    def predict(self, model, hidden: torch.Tensor) -> torch.Tensor:
        return self.cls.predictions(hidden, model.encoder.embeddings.word_embeddings.weight)

    def hf_config(self) -> dict[str, Any]:
        return {"legacy": True}
