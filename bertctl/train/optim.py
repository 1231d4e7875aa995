"""BERT's optimiser and learning-rate schedule.

AdamW with decoupled weight decay, not applied to biases and LayerNorm weights (as Google's
`optimization.py` excludes "bias", "LayerNorm" and "layer_norm"), and a linear warm-up to the peak
learning rate followed by a linear decay to zero.

The schedule is a pure function of the step number, so a resumed run needs no scheduler state:
the step alone gives the learning rate, also when a second training phase continues the step
count and schedule of a first one (the paper's 90% at 128 tokens, then 10% at 512).
"""

from __future__ import annotations

import torch
from torch import nn


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two AdamW groups: decayed weights, and biases + LayerNorm weights without decay.

    Decided by module type rather than by name, so it holds for any head; each parameter appears
    once even when a module is reachable twice.
    """
    no_decay: set[int] = set()
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if name == "bias" or isinstance(module, (nn.LayerNorm, nn.RMSNorm)):
                no_decay.add(id(p))
    decay, rest = [], []
    for p in model.parameters():  # deduplicated by nn.Module, in a stable order
        if p.requires_grad:
            (rest if id(p) in no_decay else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": rest, "weight_decay": 0.0}]


def no_decay_names(model: nn.Module) -> list[str]:
    """Names of the parameters trained without weight decay (for tests and logs)."""
    rest = {id(p) for p in param_groups(model, 0.0)[1]["params"]}
    return [n for n, p in model.named_parameters() if id(p) in rest]


def make_optimizer(model: nn.Module, lr: float, weight_decay: float = 0.01,
                   betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6
                   ) -> torch.optim.AdamW:
    """AdamW over `param_groups`. eps 1e-6 is BERT's (PyTorch defaults to 1e-8).

    The fused kernel updates all parameters in one pass: on CPU the default per-tensor
    implementation took 4-5x longer per step (a large share of a fine-tuning step on short
    sentences). It needs every parameter on one kind of device it supports.
    """
    devices = {p.device.type for p in model.parameters()}
    fused = len(devices) == 1 and devices <= {"cpu", "cuda"}
    return torch.optim.AdamW(param_groups(model, weight_decay), lr=lr, betas=betas, eps=eps,
                             fused=fused or None)


def warmup_steps(warmup: float, total_steps: int) -> int:
    """`warmup` < 1 is a fraction of the schedule's total steps, otherwise a step count."""
    if warmup < 1:
        return int(round(warmup * total_steps))
    return int(warmup)


def lr_at(step: int, peak_lr: float, warmup: int, total_steps: int) -> float:
    """Learning rate of the update that takes the model from `step` to `step + 1` (0-based).

    Linear warm-up (peak * (step+1)/warmup) then linear decay to zero at `total_steps`:
    the first update already moves (unlike a schedule that starts at exactly 0) and the last one
    uses peak/(total-warmup), the smallest positive rate, so no update is wasted at either end.
    """
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    if step >= total_steps:
        return 0.0
    return peak_lr * (total_steps - step) / max(1, total_steps - warmup)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


__all__ = ["lr_at", "make_optimizer", "no_decay_names", "param_groups", "set_lr",
           "warmup_steps"]
