"""Late interaction: a (query, document) pair scored by an embedding model's token vectors
rather than its one vector a text, ColBERT's MaxSim (Khattab and Zaharia 2020): each query
piece's best cosine with any of the document's pieces, averaged over the query's pieces.

Here it reads the last hidden states of a model trained for single-vector search (its pieces
each scaled to unit length, [CLS] and [SEP] included, as `embed --pool tokens --normalize`
writes them), so a search can be reordered by the same model with no second one to train:
mean pooling averages what MaxSim compares one by one. On the benchmark's paraphrase set it
lifted a ModernBERT pretrained by bertctl, whose cross-encoder stayed under its first stage,
at every seed (docs/benchmarks.md, "Late interaction"). A model may carry a late-interaction
head (head.py's `late`, fitted by `finetune --late-dim` with the encoder frozen, trained by
contrastive.late_info_nce over `batch_maxsim`), whose map of the states is compared instead.

A teacher's scores (`mine --teacher-scoring maxsim`) are written as a cross-encoder's are read
(reader.py: the sigmoid of a logit, whose softmax over a row is the teacher's distribution):
`sigmoid(SCALE * (maxsim - the row's best))`, so the listwise KL reads softmax(SCALE * MaxSim),
as sharp as the student's own softmax of 20 x cosine (the contrastive losses' default scale).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

SCALE = 20.0


def unit_pieces(hidden: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
    """(B, T, H) hidden states and their (B, T) mask -> each row's real pieces, (n, H) float32
    of unit length."""
    h = F.normalize(hidden.float(), dim=-1)
    return [h[i, :n] for i, n in enumerate(mask.sum(-1).tolist())]


def maxsim(query: torch.Tensor, documents: list[torch.Tensor]) -> torch.Tensor:
    """(K,): the query's (q, H) pieces against each of K documents' (d_k, H) pieces: the mean
    over query pieces of the largest cosine with a document piece (all unit vectors). One
    product for the K documents together, split by document for the maxima."""
    sims = query.float() @ torch.cat(documents).float().T           # (q, sum d_k)
    parts = torch.split(sims, [len(d) for d in documents], dim=1)
    return torch.stack([p.amax(dim=1).mean() for p in parts])


def batch_maxsim(queries: torch.Tensor, query_mask: torch.Tensor, documents: torch.Tensor,
                 document_mask: torch.Tensor) -> torch.Tensor:
    """(Bq, Bd): MaxSim of every query against every document of a batch, `maxsim`'s score
    for padded rows: (Bq, Tq, H) and (Bd, Td, H) hidden states (scaled to unit length here)
    with their masks. One product for the batch; a document's padding is never a piece's best
    and a query's padding is left out of its mean. Differentiable (training's late term)."""
    q = F.normalize(queries.float(), dim=-1)
    d = F.normalize(documents.float(), dim=-1)
    (bq, tq, h), (bd, td, _) = q.shape, d.shape
    sims = (q.reshape(bq * tq, h) @ d.reshape(bd * td, h).T).reshape(bq, tq, bd, td)
    padding = ~document_mask.bool()[None, None]                        # (1, 1, Bd, Td)
    best = sims.masked_fill(padding, float("-inf")).amax(dim=-1)       # (Bq, Tq, Bd)
    qm = query_mask.to(best.dtype)
    return (best * qm[..., None]).sum(dim=1) / qm.sum(dim=1, keepdim=True)


def teacher_scores(scores: np.ndarray) -> np.ndarray:
    """(rows, K) MaxSim scores of each row's candidates -> what `mine --teacher` writes: the
    sigmoid of SCALE x (score - the row's best), in (0, 0.5]; their logits' softmax over a row
    is softmax(SCALE x MaxSim) (the row's shift cancels)."""
    logits = SCALE * (scores - scores.max(axis=1, keepdims=True))
    return 1.0 / (1.0 + np.exp(-logits))


__all__ = ["SCALE", "batch_maxsim", "maxsim", "teacher_scores", "unit_pieces"]
