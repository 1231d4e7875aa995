"""ModernBERT (Warner et al., 2024): the encoder, then its heads. Pre-norm blocks with bias-free
LayerNorm, GeGLU feed-forward, rotary positions, no biases, a global attention layer every
third and local windows elsewhere, a final norm.

Module and parameter names are transformers' `ModernBertModel`'s and `ModernBertFor*`'s
(`embeddings.tok_embeddings`, `layers.3.attn.Wqkv`, `final_norm`; the encoder at `model`, the
shared head transform at `head`, then the `decoder`, tied to the token embeddings, or the
`classifier`), so a state dict moves between the two unchanged. Inputs and outputs are BERT's,
so the stages, the loop and the task families use either without asking which.

Padding is not removed as ModernBERT's research code does; bertctl's packed batches (several
sequences a row, `data.collate.pack_batch`) fill rows instead, and the attention keeps their
sequences apart, in the local windows too. Long inputs run local layers in blocks
(`local_attention`), so their cost grows with the window, not the sequence.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bertctl.model.attention import AttentionPolicy
from bertctl.model.dropout import Dropout
from bertctl.model.modernbert.config import GLOBAL, ModernBertConfig
from bertctl.model.roles import (MaskedLM, MultipleChoice, QuestionAnswering, RoleHead,
                                 SequenceClassifier, TokenClassifier)
from bertctl.model.sentence import mean_pool
from bertctl.model import varlen
from bertctl.model.shared import (ACTIVATIONS, EncoderBase, first_tokens,
                                  layer_mask)


class ModernBertEmbeddings(nn.Module):
    """Token embeddings, norm, dropout: positions enter the attention (rotary), not here."""

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.hidden_size,
                                           padding_idx=config.pad_token_id)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.drop = Dropout(config.embedding_dropout)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.drop(self.norm(self.tok_embeddings(input_ids)))


class Rotary(nn.Module):
    """cos and sin of each position's angles, for one theta (global and local layers differ)."""

    def __init__(self, head_size: int, theta: float):
        super().__init__()
        inv_freq = 1.0 / theta ** (torch.arange(0, head_size, 2, dtype=torch.float) / head_size)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """positions (T,) or (B, T) -> cos, sin broadcastable to (B, heads, T, head_size)."""
        angles = positions[..., None].float() * self.inv_freq
        angles = torch.cat((angles, angles), dim=-1)
        if angles.dim() == 3:
            angles = angles[:, None]
        return angles.cos(), angles.sin()


def turn(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, sign: int = 1) -> torch.Tensor:
    """x turned by its positions' angles (`sign` -1: turned back), in fp32 (bf16 angles lose
    the far positions): each half from the other with the angles' half (cos and sin repeat
    theirs), x1 * c - x2 * s and x2 * c + x1 * s, the products and sums of
    x * cos + (-x2, x1) * sin. A bf16 x times the fp32 angles is an fp32 product, and each sum
    is rounded once, into its half of the output: no fp32 copy of x, no concatenation."""
    half = x.shape[-1] // 2
    x1, x2, c, s = x[..., :half], x[..., half:], cos[..., :half], sin[..., :half]
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    first, second = (torch.sub, torch.add) if sign > 0 else (torch.add, torch.sub)
    first(x1 * c, x2 * s, out=out[..., :half])
    second(x2 * c, x1 * s, out=out[..., half:])
    return out


class _Rotate(torch.autograd.Function):
    """`turn` with its gradient: a rotation's transpose is the rotation back, so the backward
    is one more `turn` (the sums autograd would form from the products, in fewer passes)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(cos, sin)
        return turn(x, cos, sin)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        cos, sin = ctx.saved_tensors
        return turn(grad, cos, sin, -1), None, None


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, heads, T, head_size) rotated by its positions' angles (`Rotary`), in x's dtype."""
    return _Rotate.apply(x, cos, sin)


def groups(attention_mask: torch.Tensor | None, packed: bool) -> torch.Tensor | None:
    """Each token's sequence number in its row (0: padding), the one form both masks read."""
    if attention_mask is None:
        return None
    return attention_mask.long() if packed else (attention_mask != 0).long()


def local_mask(group: torch.Tensor | None, T: int, half: int,
               device: torch.device) -> torch.Tensor:
    """The (B or 1, 1, T, T) "may attend" mask of a local layer: within `half` positions, in
    the same sequence, never a padding key. Every token also sees itself, so a padding row far
    from any token still has a key (SDPA gives NaN for a row with none)."""
    i = torch.arange(T, device=device)
    band = (i[:, None] - i[None, :]).abs() <= half
    if group is None:
        return band[None, None]
    allowed = (group[:, :, None] == group[:, None, :]) | (group[:, :, None] == 0)
    allowed = allowed & (group[:, None, :] > 0) & band
    return (allowed | torch.eye(T, dtype=torch.bool, device=device))[:, None]


def blocked_local_attention(q, k, v, group: torch.Tensor | None, half: int,
                            dropout_p: float) -> torch.Tensor:
    """Local attention computed block by block: the queries of each block of `half` positions
    against the 3 * half keys that can reach them. The same result as the full (T, T) mask,
    at a cost that grows with T * half instead of T * T."""
    B, heads, T, d = q.shape
    c = half
    nb = -(-T // c)
    tail = nb * c - T
    qb = F.pad(q, (0, 0, 0, tail)).view(B, heads, nb, c, d)

    def windows(t: torch.Tensor) -> torch.Tensor:   # (B, h, T, d) -> (B, h, nb, 3c, d)
        return F.pad(t, (0, 0, c, c + tail)).unfold(2, 3 * c, c).transpose(-1, -2)

    kb, vb = windows(k), windows(v)
    r = torch.arange(c, device=q.device)[:, None]
    s = torch.arange(3 * c, device=q.device)[None, :]
    band = ((r + c) - s).abs() <= c                            # (c, 3c)
    g = torch.ones(B, T, dtype=torch.long, device=q.device) if group is None else group
    qg = F.pad(g, (0, tail)).view(B, nb, c)
    kg = F.pad(g, (c, c + tail)).unfold(1, 3 * c, c)           # (B, nb, 3c); 0 off the ends
    allowed = ((qg[..., :, None] == kg[..., None, :]) | (qg[..., :, None] == 0))
    allowed = allowed & (kg[..., None, :] > 0) & band
    allowed = allowed | (s == r + c)                           # each token sees itself

    def blocks(t: torch.Tensor) -> torch.Tensor:   # (B, h, nb, n, d) -> (B * nb, h, n, d)
        return t.transpose(1, 2).reshape(B * nb, heads, t.shape[-2], d)

    # The blocks as a batch of their own: PyTorch's fused kernels take 4-D inputs only (a
    # 5-D call runs the math kernel).
    y = F.scaled_dot_product_attention(blocks(qb), blocks(kb), blocks(vb),
                                       attn_mask=allowed.reshape(B * nb, 1, c, 3 * c),
                                       dropout_p=dropout_p)
    return y.view(B, nb, heads, c, d).transpose(1, 2).reshape(B, heads, nb * c, d)[:, :, :T]


class ModernBertAttention(nn.Module):
    def __init__(self, config: ModernBertConfig, is_global: bool, policy: AttentionPolicy):
        super().__init__()
        self.policy = policy   # the model's (ModernBertModel.attention_policy)
        self.num_heads = config.num_attention_heads
        self.is_global = is_global
        self.half = config.half_window
        self.Wqkv = nn.Linear(config.hidden_size, 3 * config.hidden_size,
                              bias=config.attention_bias)
        self.Wo = nn.Linear(config.hidden_size, config.hidden_size, bias=config.attention_bias)
        self.dropout_p = config.attention_dropout
        self.out_drop = Dropout(config.attention_dropout)

    def forward(self, x: torch.Tensor, masks: dict[str, Any],
                rotary: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        B, T, H = x.shape
        qkv = self.Wqkv(x).view(B, T, 3, self.num_heads, H // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)       # each (B, heads, T, head_size)
        q, k = rotate(q, *rotary), rotate(k, *rotary)
        p = self.dropout_p if self.training else 0.0
        # (`exporting` first: a comparison with T would fix the exported graph's length)
        if self.is_global or (not masks["exporting"] and T - 1 <= self.half):
            # (a window that spans the input is global)
            y = self.policy.attend(q, k, v, masks["global"], p)
        elif masks["sequences"] is not None and self.policy.takes_varlen(q, p):
            y = self.policy.attend(q, k, v, varlen.Masked(None, masks["sequences"]), p,
                                   window=self.half)
        elif not masks["exporting"] and T > 4 * self.half:
            y = blocked_local_attention(q, k, v, masks["group"], self.half, p)
        else:
            y = self.policy.attend(q, k, v, masks["local"], p)
        return self.out_drop(self.Wo(y.transpose(1, 2).reshape(B, T, H)))


class ModernBertMLP(nn.Module):
    """GeGLU: the input projection gives a value and a gate; act(value) * gate is projected
    back."""

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.Wi = nn.Linear(config.hidden_size, 2 * config.intermediate_size,
                            bias=config.mlp_bias)
        self.act = ACTIVATIONS[config.hidden_activation]
        self.drop = Dropout(config.mlp_dropout)
        self.Wo = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        value, gate = self.Wi(x).chunk(2, dim=-1)
        return self.Wo(self.drop(self.act(value) * gate))


class ModernBertEncoderLayer(nn.Module):
    """Pre-norm: x + attn(norm(x)), then x + mlp(norm(x)). The first layer's input is the
    embeddings' norm already, so it has no attention norm (as transformers')."""

    def __init__(self, config: ModernBertConfig, index: int, policy: AttentionPolicy):
        super().__init__()
        self.is_global = config.layer_types[index] == GLOBAL
        self.attn_norm = (nn.Identity() if index == 0 else
                          nn.LayerNorm(config.hidden_size, eps=config.norm_eps,
                                       bias=config.norm_bias))
        self.attn = ModernBertAttention(config, self.is_global, policy)
        self.mlp_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps,
                                     bias=config.norm_bias)
        self.mlp = ModernBertMLP(config)

    def forward(self, x: torch.Tensor, masks: dict[str, Any],
                rotary: dict[bool, tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), masks, rotary[self.is_global])
        return x + self.mlp(self.mlp_norm(x))


def init_modernbert_weights(model: nn.Module, config: ModernBertConfig) -> None:
    """ModernBERT's initialisation: truncated normals (at `initializer_cutoff_factor` standard
    deviations), the residual branches' output projections scaled down by sqrt(2L), norms 1."""
    std = config.initializer_range
    out_std = std / (2.0 * config.num_hidden_layers) ** 0.5

    def normal(weight: torch.Tensor, s: float) -> None:
        cut = config.initializer_cutoff_factor * s
        nn.init.trunc_normal_(weight, mean=0.0, std=s, a=-cut, b=cut)

    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            normal(module.weight, out_std if name.endswith("Wo") else std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            normal(module.weight, std)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)


class ModernBertModel(EncoderBase):
    """forward(input_ids, token_type_ids=None, attention_mask=None, output_hidden_states=False,
    num_layers=None, position_ids=None, sequence_starts=None), as `bert.modeling.BertModel`'s:
    token_type_ids are taken and not read (ModernBERT has no segments; a pair is told apart by
    its [SEP]). "hidden_states" are the embeddings' output, each layer's, and the last after
    the final norm (as transformers gives them). There is no pooler ("pooler_output" is
    None): the heads pool (`classifier_pooling`)."""

    LAYERS = "layers"   # (hidden state L is the last layer's output, before the final norm)

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.config = config
        self.embeddings = ModernBertEmbeddings(config)
        # How its attention is computed (the training loop's --attention sets it).
        self.attention_policy = AttentionPolicy()
        self.layers = nn.ModuleList(ModernBertEncoderLayer(config, i, self.attention_policy)
                                    for i in range(config.num_hidden_layers))
        self.final_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps,
                                       bias=config.norm_bias)
        # (not a ModuleDict keyed "global": a Python keyword breaks torch.export's code)
        self.global_rotary = Rotary(config.head_size, config.global_rope_theta)
        self.local_rotary = Rotary(config.head_size, config.local_rope_theta)
        init_modernbert_weights(self, config)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None,
                output_hidden_states: bool = False, num_layers: int | None = None,
                position_ids: torch.Tensor | None = None,
                sequence_starts: torch.Tensor | None = None) -> dict[str, Any]:
        del sequence_starts   # read by the heads that pool
        T = input_ids.size(1)
        if T > self.config.max_position_embeddings:
            raise ValueError(f"sequence length {T} exceeds max_position_embeddings "
                             f"{self.config.max_position_embeddings}")
        packed = position_ids is not None
        group, half = groups(attention_mask, packed), self.config.half_window
        # An exported graph takes any length: one path, the full local mask, whatever T.
        exporting = torch.compiler.is_exporting() or torch.onnx.is_in_onnx_export()
        every = layer_mask(self.attention_policy, attention_mask, packed, input_ids)
        sequences = every.sequences if isinstance(every, varlen.Masked) else None
        if sequences is None and self.attention_policy.wants_sequences(input_ids.device) \
                and not exporting:   # full rows: the local layers' windows still take it
            sequences = varlen.Sequences.of(None, packed, *input_ids.shape, input_ids.device)
        masks: dict[str, Any] = {"global": every, "group": group, "local": None,
                                 "exporting": exporting, "sequences": sequences}
        if (exporting or half < T - 1 <= 4 * half - 1) and \
                not all(layer.is_global for layer in self.layers):
            masks["local"] = local_mask(group, T, half, input_ids.device)
        positions = position_ids if packed else torch.arange(T, device=input_ids.device)
        rotary = {True: self.global_rotary(positions), False: self.local_rotary(positions)}
        states = self.run_layers(self.embeddings(input_ids), num_layers, masks, rotary)
        x = states[-1]
        if len(states) - 1 == len(self.layers):
            x = states[-1] = self.final_norm(x)
        return {
            "last_hidden_state": x,
            "pooler_output": None,
            **({"hidden_states": tuple(states)} if output_hidden_states else {}),
        }

    @staticmethod
    def _dropped_when_moved(new: int, rest: str) -> bool:
        """A layer moved to position 0 drops its attention norm (the first layer has none)."""
        return new == 0 and rest.startswith("attn_norm.")


class ModernBertPredictionHead(nn.Module):
    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size,
                               bias=config.classifier_bias)
        self.act = ACTIVATIONS[config.classifier_activation]
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.act(self.dense(x)))


# ---------------------------------------------------------------------------------------------
# Heads


class ModernBertHead(RoleHead):
    def init_module(self, module: nn.Module) -> None:
        init_modernbert_weights(module, self.config)
        if isinstance(module, nn.Linear) and module is getattr(self, "classifier", None):
            # transformers' classifier init: N(0, 1/sqrt(hidden)), as a final output layer.
            cut = self.config.initializer_cutoff_factor * self.config.hidden_size ** -0.5
            nn.init.trunc_normal_(module.weight, std=self.config.hidden_size ** -0.5,
                                  a=-cut, b=cut)


class ModernBertClassifier(ModernBertHead):
    """`head` (unless a frozen encoder's features are read), `drop`, `classifier`; the first
    token's state (classifier_pooling "cls") or the mean of the real tokens' ("mean")."""

    def add_classifier(self, features, num_outputs: int) -> None:
        if features is None:
            self.head = ModernBertPredictionHead(self.config)
        self.drop = Dropout(self.config.classifier_dropout)
        self.classifier = nn.Linear(self.width(features), num_outputs)

    def classify(self, pooled: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "head"):
            pooled = self.head(pooled)
        return self.classifier(self.drop(pooled))

    def pooled(self, hidden: torch.Tensor, attention_mask, sequence_starts=None) -> torch.Tensor:
        if self.config.classifier_pooling == "mean":
            return mean_pool(hidden, attention_mask)
        return first_tokens(hidden, sequence_starts)


class ModernBertSequenceClassificationHead(ModernBertClassifier, SequenceClassifier):
    def __init__(self, config: ModernBertConfig, num_labels: int | None = None,
                 problem_type: str = "single_label_classification", features=None):
        super().__init__(config)
        # A packed row's mean would need each sequence's own span: only [CLS] pooling packs.
        self.supports_packing = config.classifier_pooling == "cls"
        self.add_classifier(features, self.problem(num_labels, problem_type))

    def pool(self, model, input_ids, token_type_ids, attention_mask, position_ids=None,
             sequence_starts=None) -> torch.Tensor:
        return self.pooled(model.sequence(input_ids, None, attention_mask, position_ids),
                           attention_mask, sequence_starts)


class ModernBertMultipleChoiceHead(ModernBertClassifier, MultipleChoice):
    def __init__(self, config: ModernBertConfig):
        super().__init__(config)
        self.add_classifier(None, 1)

    def pool(self, model, input_ids, token_type_ids, attention_mask) -> torch.Tensor:
        return self.pooled(model.encoder(input_ids, None, attention_mask)["last_hidden_state"],
                           attention_mask)


class ModernBertQuestionAnsweringHead(ModernBertClassifier, QuestionAnswering):
    def __init__(self, config: ModernBertConfig):
        super().__init__(config)
        self.add_classifier(None, 2)

    def span_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.classify(hidden)


class ModernBertTokenClassificationHead(ModernBertClassifier, TokenClassifier):
    def __init__(self, config: ModernBertConfig, num_labels: int = 2, features=None):
        super().__init__(config)
        self.num_labels = num_labels
        self.add_classifier(features, num_labels)


class ModernBertMaskedLMHead(ModernBertHead, MaskedLM):
    """`head`, then the token-embedding table as the decoder (transformers re-ties
    `decoder.weight` from tie_word_embeddings; only `decoder.bias` is saved)."""

    def __init__(self, config: ModernBertConfig):
        super().__init__(config)
        self.head = ModernBertPredictionHead(config)
        self.decoder = nn.Module()
        if config.decoder_bias:
            self.decoder.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def predict(self, model, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(self.head(hidden), model.encoder.embeddings.tok_embeddings.weight,
                        getattr(self.decoder, "bias", None))
