"""The plain fine-tuning loop the quality studies hold bertctl against, written once: what a
user writes in a notebook over transformers' model classes. AdamW with weight decay 0.01 except
on biases and LayerNorm weights, a linear warm-up over 10% of the steps then linear decay to 0,
gradients clipped at 1.0, a seeded `torch.randperm` of the rows each epoch cut into batches.
The study supplies the data and the loss of a batch of row indices."""

from __future__ import annotations

import time
from collections.abc import Callable


def decay_groups(model, weight_decay: float = 0.01) -> list[dict]:
    """AdamW's parameter groups: biases and LayerNorm weights without weight decay."""
    plain = [(n, p) for n, p in model.named_parameters()]
    kept = [p for n, p in plain if n.endswith("bias") or "LayerNorm" in n]
    decayed = [p for n, p in plain if not (n.endswith("bias") or "LayerNorm" in n)]
    return [{"params": decayed, "weight_decay": weight_decay},
            {"params": kept, "weight_decay": 0.0}]


def fit(model, rows: int, batch_size: int, total: int, lr: float, seed: int,
        loss_of: Callable[[list[int]], object], *, eps: float = 1e-6, drop_last: bool = False,
        warmup: float = 0.1) -> float:
    """Train `model` for `total` steps over `rows` rows; `loss_of(indices)` is a batch's loss.
    `drop_last`: an epoch's last, short batch is skipped. Returns the loop's seconds."""
    import torch
    from transformers import get_linear_schedule_with_warmup

    opt = torch.optim.AdamW(decay_groups(model), lr=lr, eps=eps)
    sched = get_linear_schedule_with_warmup(opt, int(warmup * total), total)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    step, start = 0, time.perf_counter()
    while step < total:
        for idx in torch.randperm(rows, generator=gen).split(batch_size):
            if step == total or (drop_last and len(idx) < batch_size):
                break
            loss_of(idx.tolist()).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            step += 1
    return time.perf_counter() - start
