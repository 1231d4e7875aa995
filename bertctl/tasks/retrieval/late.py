"""Late interaction: a (query, document) pair scored by an embedding model's token vectors
rather than its one vector a text, ColBERT's MaxSim (Khattab and Zaharia 2020): each query
piece's best cosine with any of the document's pieces, averaged over the query's pieces.

Here it reads the last hidden states of a model trained for single-vector search (its pieces
each scaled to unit length, [CLS] and [SEP] included, as `embed --pool tokens --normalize`
writes them), so a search can be reordered by the same model with no second one to train:
mean pooling averages what MaxSim compares one by one. On the benchmark's paraphrase set it
lifted a ModernBERT pretrained by bertctl, whose cross-encoder stayed under its first stage,
at every seed (docs/benchmarks.md, "Late interaction").

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


def teacher_scores(scores: np.ndarray) -> np.ndarray:
    """(rows, K) MaxSim scores of each row's candidates -> what `mine --teacher` writes: the
    sigmoid of SCALE x (score - the row's best), in (0, 0.5]; their logits' softmax over a row
    is softmax(SCALE x MaxSim) (the row's shift cancels)."""
    logits = SCALE * (scores - scores.max(axis=1, keepdims=True))
    return 1.0 / (1.0 + np.exp(-logits))


__all__ = ["SCALE", "maxsim", "teacher_scores", "unit_pieces"]
