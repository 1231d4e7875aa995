"""Cached negatives, the retrieval family's training step for batches larger than memory
(`--cache-negatives N`): GradCache (Gao et al. 2021). The loss of a large batch needs every
vector of the batch, but the gradients through the encoder only per sequence: the batch is
embedded in micro-batches without graphs, the loss is taken over the cached vectors, and in
the backward pass each micro-batch is embedded again with its graph (the same dropout, the
same autocast) and back-propagated with its vectors' gradients. The loss and the gradients are
those of the full batch; the memory that of one micro-batch plus the vectors.

The last micro-batch keeps its graph from the first pass instead: the backward reaches it
first (autograd runs the nodes made last first) and frees it before the others are embedded
again, so the memory stays one micro-batch's, and a step of k micro-batches makes k - 1
extra forward passes where GradCache (and sentence-transformers' CachedMNRL) make k.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def _rng_state(device: torch.device):
    return (torch.get_rng_state(),
            torch.cuda.get_rng_state(device) if device.type == "cuda" else None)


class _Replay:
    """Runs a function again with the random state (dropout) and autocast of its first run."""

    def __init__(self, device: torch.device):
        self.device = device
        self.state = _rng_state(device)
        self.autocast = (torch.is_autocast_enabled(device.type),
                         torch.get_autocast_dtype(device.type))

    def __call__(self, fn, *args):
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices, device_type=self.device.type):
            torch.set_rng_state(self.state[0])
            if self.state[1] is not None:
                torch.cuda.set_rng_state(self.state[1], self.device)
            with torch.autocast(self.device.type, dtype=self.autocast[1],
                                enabled=self.autocast[0]):
                return fn(*args)


class _CachedEncoding(torch.autograd.Function):
    @staticmethod
    def forward(ctx, anchor, embed, chunks):
        ctx.embed, ctx.chunks, ctx.replays = embed, chunks, []
        parts = []
        for chunk in chunks:
            ctx.replays.append(_Replay(chunk[0].device))   # the state this run starts from
            parts.append(embed(*chunk).float())   # (a Function's forward keeps no graph)
        return torch.cat(parts)

    @staticmethod
    def backward(ctx, grad):
        start = 0
        for chunk, replay in zip(ctx.chunks, ctx.replays):
            with torch.enable_grad():
                vectors = replay(ctx.embed, *chunk).float()
            torch.autograd.backward(vectors, grad[start:start + len(vectors)])
            start += len(vectors)
        return None, None, None


def cached_encoding(embed: Callable[..., torch.Tensor], inputs: list[torch.Tensor | None],
                    micro_batch: int) -> torch.Tensor:
    """`embed(*inputs)` (rows x dim) for a batch whose rows are embedded `micro_batch` at a
    time without graphs; the gradient reaching the result is back-propagated through `embed`
    a micro-batch at a time (see the module doc). `inputs` are row-aligned tensors (None
    passes through)."""
    n = inputs[0].shape[0]
    chunks = [tuple(None if x is None else x[i:i + micro_batch] for x in inputs)
              for i in range(0, n, micro_batch)]
    if len(chunks) == 1:
        return embed(*chunks[0]).float()
    # A leaf that needs a gradient makes the result need one, so autograd calls backward.
    anchor = torch.zeros((), requires_grad=True)
    cached = _CachedEncoding.apply(anchor, embed, chunks[:-1])
    return torch.cat([cached, embed(*chunks[-1]).float()])


__all__ = ["cached_encoding"]
