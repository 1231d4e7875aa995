"""How an embedding model is trained: the contrastive losses (their registry: loss.py) and the
module the training loop runs, which embeds a batch (in one pass, or cached: cached.py) and
takes the job's loss over its vectors. The model itself only embeds (head.py's
SentenceEmbedding); what it is trained with is the job's choice (the family's `training_module`).

- `infonce`: in-batch negatives. Each query's positive is its own document and every other
  document of the batch (the other queries' positives and every hard negative) is a negative:
  cross-entropy over `scale * cos(q, d)`, as sentence-transformers' MultipleNegativesRankingLoss.
- `symmetric`: infonce plus the documents' side (each positive against every query), as its
  MultipleNegativesSymmetricRankingLoss.
- `cosent`: pairs with graded scores (STS): for every two pairs whose gold scores differ, the
  one scored lower must have the lower cosine: log(1 + sum exp(scale * (cos_low - cos_high))),
  as sentence-transformers' CoSENTLoss.
- `margin_mse`: a teacher's (a cross-encoder's) scores of a query's candidates: the student's
  cosine margins between the positive and each negative regress onto the teacher's.
- `kl`: the same scores, listwise: the student's distribution over a query's candidates
  (softmax of scale * cosine) brought to the teacher's (softmax of its logits) by KL divergence;
  the default for a file with a teacher's scores (it gains where MarginMSE loses:
  docs/benchmarks.md).
- `late_infonce` (`--late-dim`, not a `--loss`): infonce with MaxSim over the pieces mapped by
  the model's late-interaction head in place of the cosine, the head trained alone.

The registered form of each (`*_loss`) takes the batch's vectors (B, K, D) (column 0 the
queries, or a pair's first texts), its labels and the scale.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from bertctl.errors import BertctlError
from bertctl.model.dropout import has_dropout
from bertctl.step_scope import host_twin
from bertctl.tasks.retrieval import cached
from bertctl.search import late
from bertctl.tasks.retrieval.loss import LOSSES, Loss, default_loss


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
    # The other pairs at -inf add nothing to the sum (selecting the wrong ones would give a
    # tensor whose size the host must read from the device).
    diff = diff.masked_fill(~wrong, -math.inf).reshape(-1)
    zero = torch.zeros(1, dtype=diff.dtype, device=diff.device)
    return torch.logsumexp(torch.cat([zero, diff]), dim=0)


def _candidate_cosines(queries: torch.Tensor, documents: torch.Tensor,
                       teacher: torch.Tensor) -> torch.Tensor:
    """(B, K): each query's cosine with each of its candidates, which the teacher's scores
    (B, K) must match: broadcasting would compare the wrong candidates, silently."""
    cos = F.cosine_similarity(queries.float()[:, None], documents.float(), dim=-1)
    if teacher.shape != cos.shape:
        raise ValueError(f"the teacher scored {tuple(teacher.shape)} candidates, the batch "
                         f"has {tuple(cos.shape)}")
    return cos


def margin_mse(queries: torch.Tensor, documents: torch.Tensor,
               teacher: torch.Tensor) -> torch.Tensor:
    """Queries (B, D) and their candidates (B, K, D), the positive first: the squared error
    between the student's margins cos(q, p) - cos(q, n_j) and the teacher's scores' margins
    t_p - t_j, over every negative j (Hofstatter et al. 2020; sentence-transformers'
    MarginMSELoss, with cosines where it takes dot products: bertctl's vectors are compared by
    cosine)."""
    cos = _candidate_cosines(queries, documents, teacher)
    teacher = teacher.float()
    return F.mse_loss(cos[:, :1] - cos[:, 1:], teacher[:, :1] - teacher[:, 1:])


def listwise_kl(queries: torch.Tensor, documents: torch.Tensor, teacher: torch.Tensor,
                scale: float) -> torch.Tensor:
    """Queries (B, D) and their candidates (B, K, D), with a teacher's scores (B, K) as
    `mine --teacher` writes them (CrossEncoder.predict's: the sigmoid of its logit): the KL
    divergence from the teacher's distribution over each row's candidates (the softmax of its
    logits, recovered from the scores) to the student's (the softmax of scale * cos), averaged
    over rows (sentence-transformers' DistillKLDivLoss, with cosines). Unlike MarginMSE, it
    asks only for the teacher's order and confidence among the candidates, not for cosine
    margins the size of its score gaps."""
    cos = _candidate_cosines(queries, documents, teacher)
    p = teacher.float().clamp(1e-7, 1 - 1e-7)     # a sigmoid's output: logit(p) undoes it
    target = F.log_softmax(torch.log(p) - torch.log1p(-p), dim=-1)
    return F.kl_div(F.log_softmax(scale * cos, dim=-1), target, log_target=True,
                    reduction="batchmean")


def late_info_nce(pieces: list[tuple[torch.Tensor, torch.Tensor]], scale: float
                  ) -> torch.Tensor:
    """`info_nce` with MaxSim (late.batch_maxsim) in place of the cosine: `pieces` are each
    column's last hidden states (B, T, H) and mask (B, T), the queries first; every document
    of the batch is a candidate for every query (ColBERT's in-batch training, as pylate's
    Contrastive loss over its MaxSim, averaged over the query's pieces here as
    `eval --rerank-scoring maxsim` scores)."""
    (q, q_mask), documents = pieces[0], pieces[1:]
    scores = torch.stack([late.batch_maxsim(q, q_mask, d, d_mask) for d, d_mask in documents],
                         dim=-1)                                   # (B, B, K): query, row, column
    b, k = scores.shape[0], scores.shape[-1]
    target = torch.arange(b, device=scores.device) * k
    return F.cross_entropy(scale * scores.reshape(b, b * k), target)


def infonce_loss(e: torch.Tensor, _, scale: float) -> torch.Tensor:
    return info_nce(e[:, 0], e[:, 1:], scale)


def symmetric_loss(e: torch.Tensor, _, scale: float) -> torch.Tensor:
    return info_nce(e[:, 0], e[:, 1:], scale, symmetric=True)


def cosent_loss(e: torch.Tensor, scores: torch.Tensor, scale: float) -> torch.Tensor:
    return cosent(e[:, 0], e[:, 1], scores.reshape(-1), scale)


def margin_mse_loss(e: torch.Tensor, teacher: torch.Tensor, _) -> torch.Tensor:
    return margin_mse(e[:, 0], e[:, 1:], teacher)


def kl_loss(e: torch.Tensor, teacher: torch.Tensor, scale: float) -> torch.Tensor:
    return listwise_kl(e[:, 0], e[:, 1:], teacher, scale)


def kl_infonce_loss(e: torch.Tensor, teacher: torch.Tensor, scale: float) -> torch.Tensor:
    return listwise_kl(e[:, 0], e[:, 1:], teacher, scale) + info_nce(e[:, 0], e[:, 1:], scale)


def margin_mse_infonce_loss(e: torch.Tensor, teacher: torch.Tensor, scale: float
                            ) -> torch.Tensor:
    return margin_mse(e[:, 0], e[:, 1:], teacher) + info_nce(e[:, 0], e[:, 1:], scale)


class _GatherRows(torch.autograd.Function):
    """Every rank's rows, in rank order, with this rank's own carrying the gradient: every rank
    takes the same loss over the gathered rows, so the gradient of its own rows is the loss's
    whole gradient there; times the world size, since DDP averages the ranks' gradients."""

    @staticmethod
    def forward(ctx, rows: torch.Tensor) -> torch.Tensor:
        ctx.rank, ctx.world, ctx.n = dist.get_rank(), dist.get_world_size(), rows.shape[0]
        return _gathered(rows)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad[ctx.rank * ctx.n:(ctx.rank + 1) * ctx.n] * ctx.world


def _gathered(rows: torch.Tensor) -> torch.Tensor:
    parts = [torch.empty_like(rows) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, rows.contiguous())
    return torch.cat(parts)


def across_ranks(vectors: torch.Tensor, labels: torch.Tensor | None
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The global batch's vectors and labels under torchrun (each rank's rows: the loss sees
    every rank's documents as negatives, as one process on the global batch would); in one
    process, as they are."""
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return vectors, labels
    return _GatherRows.apply(vectors), None if labels is None else _gathered(labels)


class ContrastiveLoss(nn.Module):
    """The embedding model trained on a contrastive loss. In training, a (B, K, T) batch is
    embedded (all of it, or `cache_negatives` sequences at a time) and `loss` taken over the
    vectors, summed over the model's Matryoshka sizes; otherwise, the model's own outputs.
    The loop saves the model inside it (`model.`); the stage writes `model`."""

    packs = False   # a row is a query with its documents, never packed
    # The training loop's memory plan (bertctl.train.memory): the loss compares a batch's
    # rows, which micro-batches would split.
    compares_rows = ("--cache-negatives N (the same loss at the memory of N sequences; a "
                     "smaller N where one is given)")

    def __init__(self, model: nn.Module, loss: Loss | None = None, scale: float = 20.0,
                 cache_negatives: int = 0, late_only: bool = False):
        """`loss` None: the batch's labels choose it (`default_loss`). `late_only`: the
        loss is `late_info_nce` over the head's mapped pieces of the frozen encoder's states
        (the family freezes every other weight)."""
        super().__init__()
        self.model, self.loss = model, loss
        self.scale, self.cache_negatives = float(scale), int(cache_negatives)
        self.late_only = late_only

    @property
    def backward_replays(self) -> bool:
        """Whether its backward runs the encoder again (cached negatives): DDP's gradient
        hooks would fire once a replay, so the training loop averages the ranks' gradients
        itself."""
        return self.cache_negatives > 0

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        shape = input_ids.shape
        if not (self.training and torch.is_grad_enabled() and len(shape) == 3
                and shape[1] >= 2):
            return self.model(input_ids, token_type_ids, attention_mask)
        if self.loss is None:
            self.loss = LOSSES[default_loss(labels is not None and labels.dim() == 1,
                                            labels is not None and labels.dim() == 2)]
        head = self.model.own_head
        flat = head.columns(input_ids, token_type_ids, attention_mask)
        if self.late_only:
            if dist.is_initialized() and dist.get_world_size() > 1:
                raise BertctlError("--late-dim trains the late-interaction head in one process "
                                   "(not under torchrun): each process's batch would be its "
                                   "own negatives")
            return self._late_head(flat, shape[0], head.host_lengths(attention_mask))
        if 0 < self.cache_negatives < flat[0].shape[0]:
            # Micro-batches of similar length pad less; the vectors go back to their rows.
            order = None if flat[2] is None else torch.argsort(flat[2].sum(-1), stable=True)
            if order is not None:
                flat = [None if t is None else t[order] for t in flat]
            vectors = cached.cached_encoding(functools.partial(head.trimmed, self.model), flat,
                                             self.cache_negatives)
            if order is not None:
                vectors = vectors[torch.argsort(order)]
            vectors = vectors.reshape(shape[1], shape[0], -1).transpose(0, 1)
        else:
            vectors = self.model(input_ids, token_type_ids, attention_mask)["embeddings"]
        ids = host_twin(input_ids)   # (the host's copy in training: the device's waits)
        ids = input_ids if ids is None else ids
        if shape[1] == 2 and labels is None and not has_dropout(self.model) and \
                torch.equal(ids[:, 0], ids[:, 1]):
            raise BertctlError("texts alone (SimCSE) are their own positives under dropout, "
                               "and this model has none (ModernBERT's default): give "
                               "--dropout, e.g. 0.1")
        vectors, labels = across_ranks(vectors, labels)
        if vectors.shape[0] == 1 and (self.loss.labels == "scores"
                              or (self.loss.labels == "none" and shape[1] == 2)):
            raise BertctlError("--batch-size 1: a contrastive loss compares the examples of "
                               "a batch (a query's negatives are the others' positives; "
                               "CoSENT ranks pairs against each other): use 2 or more")
        return {"embeddings": vectors, "loss": self.total(vectors, labels)}

    def _late_head(self, flat: list, b: int, lengths: np.ndarray | None
                   ) -> dict[str, torch.Tensor]:
        """The late-interaction head's step: the encoder's states of (K * B, T) rows, column
        by column (each cut to its longest), without graphs or dropout (frozen, as
        --freeze-encoder's), mapped by the head, and `late_info_nce` over them."""
        head = self.model.own_head
        mask = flat[2] if flat[2] is not None else torch.ones_like(flat[0])
        vectors, pieces = [], []
        was = self.model.training
        self.model.eval()
        try:
            for ids, types, m, _ in head.column_batches([flat[0], flat[1], mask], b, lengths):
                with torch.no_grad():
                    v, hidden = head.embed_with_states(self.model, ids, types, m)
                vectors.append(v)
                pieces.append((head.token_vectors(hidden), m))
        finally:
            self.model.train(was)
        loss = late_info_nce(pieces, self.scale)
        return {"embeddings": torch.stack(vectors, dim=1), "loss": loss}

    def facts(self) -> dict:
        """The loss trained with (the one the labels chose, where --loss was unset), for the
        artifact's stats."""
        if self.late_only:
            return {"name": "late_infonce", "scale": self.scale, "trained": "late head"}
        return {"name": self.loss.name if self.loss is not None else None,
                "scale": self.scale, "cache_negatives": self.cache_negatives}

    def total(self, e: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor:
        """The loss of (B, K, D) vectors; with Matryoshka sizes (the model's), the sum of the
        losses of the vectors cut to each (sentence-transformers' MatryoshkaLoss, weights 1)."""
        if (labels is None) != (self.loss.labels == "none"):
            raise BertctlError(f"--loss {self.loss.name} takes " + (
                "no labels" if self.loss.labels == "none" else f"labels ({self.loss.labels})")
                + f", the batch has {'none' if labels is None else 'some'}")
        total = None
        for d in self.model.own_head.matryoshka_dims or (e.shape[-1],):
            loss = self.loss.compute(e[..., :d], labels, self.scale)
            total = loss if total is None else total + loss
        return total


__all__ = ["ContrastiveLoss", "cosent", "cosent_loss", "info_nce", "infonce_loss",
           "late_info_nce", "margin_mse", "margin_mse_infonce_loss", "margin_mse_loss",
           "symmetric_loss"]
