"""The encoder's hidden states as features: which layers, how they are combined, and the
feature-based heads of the paper's ELMo-style ablation (a frozen encoder under a trained head).

Hidden states are numbered as transformers' `output_hidden_states`: 0 is the embeddings layer's
output, L the last layer; negative indices count from the end.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from bertctl.errors import BertctlError

COMBINES = ("concat", "sum", "mean", "weighted")


def parse_layers(text: str, num_layers: int) -> tuple[int, ...]:
    """`-1,-2`, `0,6` or `all` as indices into the L + 1 hidden states."""
    n = num_layers + 1
    if text.strip() == "all":
        return tuple(range(n))
    out = []
    for part in text.split(","):
        try:
            i = int(part)
        except ValueError:
            raise BertctlError(f"--layers {text}: expected comma-separated layer indices or "
                               "'all'") from None
        if not -n <= i < n:
            raise BertctlError(f"--layers {i}: the model has {num_layers} layers (hidden states "
                               f"0 to {num_layers}, or -1 to -{n})")
        out.append(i % n)
    if len(set(out)) != len(out):
        raise BertctlError(f"--layers {text}: a layer is given twice")
    return tuple(out)


def combine_layers(states: Sequence[torch.Tensor], layers: Sequence[int], combine: str,
                   weights: torch.Tensor | None = None, gamma: torch.Tensor | None = None
                   ) -> torch.Tensor:
    """The chosen hidden states joined on the last dimension, summed, averaged, or (weighted)
    mixed as ELMo does: gamma x sum_i softmax(weights)_i x h_i."""
    chosen = [states[i].float() for i in layers]
    if combine == "concat":
        return torch.cat(chosen, dim=-1)
    if combine == "weighted":
        mix = torch.softmax(weights.float(), dim=0)
        return gamma.float() * sum(w * h for w, h in zip(mix, chosen))
    total = torch.stack(chosen).sum(0)
    return total / len(chosen) if combine == "mean" else total


def feature_width(hidden_size: int, layers: Sequence[int], combine: str) -> int:
    return hidden_size * (len(layers) if combine == "concat" else 1)


class FrozenFeatures(nn.Module):
    """Features from a frozen encoder: it runs without autograd and in eval mode (no dropout:
    the features are fixed, as the paper's were), and only what follows it learns. With
    `head="bilstm"` a two-layer bidirectional LSTM (hidden size as the encoder's) reads the
    combined features first (the paper's feature-based NER head)."""

    def __init__(self, hidden_size: int, layers: Sequence[int], combine: str = "concat",
                 head: str = "linear"):
        super().__init__()
        if combine not in COMBINES:
            raise ValueError(f"combine must be one of {COMBINES}, got {combine!r}")
        self.layers, self.combine, self.head = tuple(layers), combine, head
        if combine == "weighted":
            self.scalar_weights = nn.Parameter(torch.zeros(len(self.layers)))
            self.gamma = nn.Parameter(torch.ones(()))
        width = feature_width(hidden_size, self.layers, combine)
        self.lstm = None
        if head == "bilstm":
            self.lstm = nn.LSTM(width, hidden_size, num_layers=2, bidirectional=True,
                                batch_first=True)
            width = 2 * hidden_size
        elif head != "linear":
            raise ValueError(f"head must be linear or bilstm, got {head!r}")
        self.width = width

    def settings(self) -> dict:
        return {"layers": list(self.layers), "combine": self.combine, "head": self.head}

    def forward(self, bert: nn.Module, input_ids, token_type_ids, attention_mask,
                position_ids=None) -> torch.Tensor:
        with torch.no_grad():
            states = bert(input_ids, token_type_ids, attention_mask, output_hidden_states=True,
                          num_layers=max(self.layers), position_ids=position_ids)["hidden_states"]
        x = combine_layers(states, self.layers, self.combine,
                           getattr(self, "scalar_weights", None), getattr(self, "gamma", None))
        if self.lstm is None:
            return x
        lengths = (attention_mask.sum(1) if attention_mask is not None
                   else torch.full((x.shape[0],), x.shape[1], device=x.device)).cpu()
        with torch.autocast(x.device.type, enabled=False):
            packed = nn.utils.rnn.pack_padded_sequence(x.float(), lengths, batch_first=True,
                                                       enforce_sorted=False)
            out, _ = self.lstm(packed)
            out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True,
                                                      total_length=x.shape[1])
        return out
