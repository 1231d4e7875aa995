"""Variable-length attention: each sequence of a padded or packed batch attends over its own
tokens only, with no (T, T) mask, as MosaicBERT and ModernBERT's trainer run it on a GPU.

A batch's attention mask says where its sequences are (`Sequences`: the flat positions of the
real tokens, their cumulative lengths, the longest), found on the host where the training
loop has the batch's host copy (step_scope.host_twin), so the step waits for nothing. An
encoder hands its layers `Masked` (the boolean mask they always had, with the sequences
beside it); the attention policy (attention.py) takes the variable-length path where it may:
on a GPU PyTorch's flash kernel (`torch.nn.attention.varlen.varlen_attn`, bf16 or fp16, no
dropout on the probabilities, no additive bias, a window for ModernBERT's local layers),
elsewhere `reference`, the same attention one sequence at a time (exact, and what the tests
hold the GPU path's index arithmetic to). Padding positions come out zero: nothing reads them.
DeBERTa's relative attention adds a bias to every score, which the kernel does not take.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from bertctl.step_scope import host_twin

try:   # (PyTorch 2.9 on; before it the GPU takes the masked path)
    from torch.nn.attention.varlen import varlen_attn
except ImportError:
    varlen_attn = None


@dataclass(frozen=True)
class Sequences:
    """`index` (N,): the flat positions in (B * T) of the real tokens, sequence by sequence;
    `cu_seqlens` (S + 1,) int32: where each sequence starts in them, and their total; and
    `max_seqlen`, the longest (a host number: the kernel's grid)."""

    index: torch.Tensor
    cu_seqlens: torch.Tensor
    max_seqlen: int

    @classmethod
    def of(cls, attention_mask: torch.Tensor | None, packed: bool, rows: int, length: int,
           device: torch.device) -> Sequences:
        """The sequences of a (rows, length) batch: each row's real tokens (1 = token), or a
        packed batch's sequences (its mask numbers them in each row, 0 = padding); without a
        mask, each row whole. Computed from the host's copy of the mask where there is one."""
        mask = host_twin(attention_mask)
        if mask is None and attention_mask is not None:
            # Outside the training step (evaluation, inference): one read of the mask.
            mask = attention_mask.cpu()
        if mask is None:
            lengths = torch.full((rows,), length, dtype=torch.int64)
            index = torch.arange(rows * length)
        else:
            flat = mask.reshape(-1).long()
            index = (flat > 0).nonzero().squeeze(1)
            row = torch.div(index, length, rounding_mode="floor")
            number = flat.index_select(0, index) if packed else torch.ones_like(index)
            # A sequence is a run of one number in one row.
            key = row * (int(flat.max()) + 1 if packed and flat.numel() else 2) + number
            lengths = torch.unique_consecutive(key, return_counts=True)[1]
        cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
        cu[1:] = torch.cumsum(lengths, 0)
        longest = int(lengths.max()) if len(lengths) else 0
        if device.type == "cuda":   # pinned: the copies do not wait
            index, cu = index.pin_memory(), cu.pin_memory()
        return cls(index.to(device, non_blocking=True), cu.to(device, non_blocking=True),
                   longest)


@dataclass(frozen=True)
class Masked:
    """What an encoder hands its layers for attention: the boolean "may attend" mask
    (shared.attention_bias's), and the batch's sequences for the variable-length path."""

    dense: torch.Tensor | None
    sequences: Sequences | None


def supported(q: torch.Tensor) -> bool:
    """Whether PyTorch's variable-length kernel runs these queries (flash: a CUDA GPU, fp16 or
    bf16 under autocast or not, PyTorch 2.9 or later)."""
    if q.device.type != "cuda" or varlen_attn is None:
        return False
    dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else q.dtype
    return dtype in (torch.float16, torch.bfloat16)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sequences: Sequences,
           scale: float | None = None, window: int | None = None) -> torch.Tensor:
    """Attention of (B, heads, T, d) tensors over each sequence's own tokens (and within
    `window` positions each side, where given); zeros at padding."""
    B, heads, T, d = q.shape

    def flat(t: torch.Tensor) -> torch.Tensor:   # (N, heads, d): the real tokens
        return t.transpose(1, 2).reshape(B * T, heads, d).index_select(0, sequences.index)

    kernel = _flash if supported(q) else reference
    out = kernel(flat(q), flat(k), flat(v), sequences.cu_seqlens, sequences.max_seqlen, scale,
                 window)
    full = out.new_zeros(B * T, heads, d).index_copy(0, sequences.index, out)
    return full.view(B, T, heads, d).transpose(1, 2)


def _flash(q, k, v, cu: torch.Tensor, longest: int, scale: float | None,
           window: int | None) -> torch.Tensor:
    dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else q.dtype
    q, k, v = (t.to(dtype) for t in (q, k, v))
    return varlen_attn(q, k, v, cu, cu, longest, longest, scale=scale,
                       window_size=(-1, -1) if window is None else (window, window))


def reference(q, k, v, cu: torch.Tensor, longest: int, scale: float | None,
              window: int | None) -> torch.Tensor:
    """The variable-length kernel's attention one sequence at a time, with PyTorch's SDPA: the
    same result (rounding aside) at any length, on any device."""
    bounds = cu.tolist()
    outs = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        qs, ks, vs = (t[a:b].transpose(0, 1)[None] for t in (q, k, v))
        mask = None
        if window is not None:
            i = torch.arange(b - a, device=q.device)
            mask = (i[:, None] - i[None, :]).abs() <= window
        outs.append(F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, scale=scale)
                    [0].transpose(0, 1))
    return torch.cat(outs) if outs else q.new_zeros(q.shape)


__all__ = ["Masked", "Sequences", "attend", "reference", "supported"]
