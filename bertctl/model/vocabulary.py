"""Growing a model's vocabulary for an extended tokenizer (`tokenize --extend`), in any
architecture: the per-token parameters (the word-embedding table and the masked-LM decoder's
bias; the decoders of both architectures read the table at call time, so they follow it) gain
rows for the new pieces, each the mean of the rows of the pieces the base tokenizer splits it
into. Every existing row keeps its values exactly."""

from __future__ import annotations

import torch
from torch import nn


def grow_vocabulary(model: nn.Module, first_new: int, pieces: list[list[int]]) -> int:
    """Give ids first_new, first_new + 1, ... the mean rows of `pieces` (one list of base ids
    per new id); tables shorter than the new vocabulary grow. Returns the new vocabulary size
    (also set in model.config)."""
    old = int(model.config.vocab_size)
    new = max(old, first_new + len(pieces))
    owners = [(m, name, p) for m in model.modules()
              for name, p in m.named_parameters(recurse=False)
              if p.shape[0] == old and (isinstance(m, nn.Embedding) or p.dim() == 1)]
    with torch.no_grad():
        for module, name, p in owners:
            grown = torch.cat([p.detach(), p.new_zeros((new - old, *p.shape[1:]))])
            for i, ids in enumerate(pieces):
                grown[first_new + i] = p[ids].mean(0) if ids else p.mean(0)
            setattr(module, name, nn.Parameter(grown, requires_grad=p.requires_grad))
            if isinstance(module, nn.Embedding):
                module.num_embeddings = new
    model.config.vocab_size = new
    return new
