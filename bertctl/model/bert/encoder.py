"""The BERT encoder (Devlin et al., 2018), in one file that reads top to bottom.

Module and parameter names follow Hugging Face's `BertModel` exactly (`embeddings.LayerNorm`,
`encoder.layer.3.attention.self.query`, ...), so a state dict moves between the two with no
renaming and any HF BERT checkpoint is also ours. Everything else is written for speed and
clarity: attention goes through the model's `AttentionPolicy` (model/attention.py), position and segment embeddings
are added without building index tensors, and there is no decoder/cache machinery.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from bertctl.model.bert.config import BertConfig
from bertctl.model.shared import (ACTIVATIONS, EncoderBase, attention_bias, first_tokens,
                                  init_normal)
from bertctl.model.attention import AttentionPolicy
from bertctl.model.dropout import Dropout


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


class BertProjectAddNorm(nn.Module):
    """dense -> dropout -> add the block's input -> LayerNorm: BERT's post-LN sub-layer output.

    HF names it BertSelfOutput after attention and BertOutput after the feed-forward; the two
    differ only in the input width.
    """

    def __init__(self, in_features: int, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(in_features, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig, policy: AttentionPolicy):
        super().__init__()
        self.self = BertSelfAttention(config, policy)
        self.output = BertProjectAddNorm(config.hidden_size, config)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return self.output(self.self(x, mask), x)


class BertIntermediate(nn.Module):
    """The feed-forward's expansion to intermediate_size and its activation."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = ACTIVATIONS[config.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.dense(x))


class BertLayer(nn.Module):
    def __init__(self, config: BertConfig, policy: AttentionPolicy):
        super().__init__()
        self.attention = BertAttention(config, policy)
        self.intermediate = BertIntermediate(config)
        self.output = BertProjectAddNorm(config.intermediate_size, config)

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
        mask = attention_bias(attention_mask, packed=position_ids is not None)
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


__all__ = ["BertModel", "init_bert_weights"]
