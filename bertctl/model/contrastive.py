"""Embedding models' training: the contrastive losses and cached negatives (a vector from
hidden states is bertctl.model.sentence's).

- `info_nce`: in-batch negatives. Each query's positive is its own document and every other
  document of the batch (the other queries' positives and every hard negative) is a negative:
  cross-entropy over `scale * cos(q, d)`, as sentence-transformers' MultipleNegativesRankingLoss;
  `symmetric` adds the documents' side (each positive against every query), as its
  MultipleNegativesSymmetricRankingLoss.
- `cosent`: pairs with graded scores (STS): for every two pairs whose gold scores differ, the
  one scored lower must have the lower cosine: log(1 + sum exp(scale * (cos_low - cos_high))),
  as sentence-transformers' CoSENTLoss.
- `margin_mse`: a teacher's (a cross-encoder's) scores of a query's candidates: the student's
  cosine margins between the positive and each negative regress onto the teacher's.
- `CachedEncoding`: GradCache (Gao et al. 2021). The loss of a large batch needs every vector
  of the batch, but the gradients through the encoder only per sequence: the batch is embedded
  in micro-batches without graphs, the loss is taken over the cached vectors, and in the
  backward pass each micro-batch is embedded again with its graph (the same dropout, the same
  autocast) and back-propagated with its vectors' gradients. The loss and the gradients are
  those of the full batch; the memory that of one micro-batch plus the vectors.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

LOSSES = ("infonce", "symmetric", "cosent", "margin_mse")


def info_nce(queries: torch.Tensor, documents: torch.Tensor, scale: float,
             symmetric: bool = False) -> torch.Tensor:
    """Queries (B, D) against documents (B, K, D): document [i, 0] is query i's positive, the
    rest of row i its hard negatives; every document of the batch is a candidate for every
    query. Cosine similarities, so the vectors need not be normalised."""
    b, k, _ = documents.shape
    q = F.normalize(queries.float(), dim=-1)
    d = F.normalize(documents.float(), dim=-1).reshape(b * k, -1)
    scores = scale * q @ d.T                                   # (B, B*K)
    target = torch.arange(b, device=scores.device) * k
    loss = F.cross_entropy(scores, target)
    if symmetric:   # each positive picks its query among the batch's queries
        positives = scores[:, ::k].T                           # (B, B): positive j vs query i
        loss = (loss + F.cross_entropy(positives, torch.arange(b, device=scores.device))) / 2
    return loss


def cosent(a: torch.Tensor, b: torch.Tensor, gold: torch.Tensor, scale: float) -> torch.Tensor:
    """CoSENT over pairs (a_i, b_i) with gold scores: every (i, j) with gold_i > gold_j should
    have cos_i > cos_j."""
    cos = F.cosine_similarity(a.float(), b.float(), dim=-1) * scale
    diff = cos[None, :] - cos[:, None]                         # [i, j] = cos_j - cos_i
    wrong = gold.float()[:, None] > gold.float()[None, :]      # i should be above j
    diff = diff[wrong]
    zero = torch.zeros(1, dtype=diff.dtype, device=diff.device)
    return torch.logsumexp(torch.cat([zero, diff]), dim=0)


def margin_mse(queries: torch.Tensor, documents: torch.Tensor,
               teacher: torch.Tensor) -> torch.Tensor:
    """Queries (B, D) and their candidates (B, K, D), the positive first: the squared error
    between the student's margins cos(q, p) - cos(q, n_j) and the teacher's scores' margins
    t_p - t_j, over every negative j (Hofstatter et al. 2020; sentence-transformers'
    MarginMSELoss, with cosines where it takes dot products: bertctl's vectors are compared by
    cosine)."""
    cos = F.cosine_similarity(queries.float()[:, None], documents.float(), dim=-1)
    teacher = teacher.float()
    return F.mse_loss(cos[:, :1] - cos[:, 1:], teacher[:, :1] - teacher[:, 1:])


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
    # A leaf that needs a gradient makes the result need one, so autograd calls backward.
    anchor = torch.zeros((), requires_grad=True)
    return _CachedEncoding.apply(anchor, embed, chunks)


__all__ = ["LOSSES", "cached_encoding", "cosent", "info_nce", "margin_mse"]
