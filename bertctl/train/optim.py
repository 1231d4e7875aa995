"""BERT's optimiser and learning-rate schedule.

AdamW with decoupled weight decay, not applied to biases and LayerNorm weights (as Google's
`optimization.py` excludes "bias", "LayerNorm" and "layer_norm"), and a linear warm-up to the peak
learning rate followed by a linear decay to zero.

The schedule is a pure function of the step number, so a resumed run needs no scheduler state:
the step alone gives the learning rate, also when a second training phase continues the step
count and schedule of a first one (the paper's 90% at 128 tokens, then 10% at 512).
"""

from __future__ import annotations

import math

import torch

from bertctl.errors import BertctlError
from torch import nn

from bertctl.train.encoders import layer_depths
from bertctl.train.optimizers import OPTIMIZERS


def param_groups(model: nn.Module, weight_decay: float,
                 layer_decay: float | None = None) -> list[dict]:
    """Two AdamW groups: decayed weights, and biases + LayerNorm weights without decay.

    Decided by module type rather than by name, so it holds for any head; each parameter appears
    once even when a module is reachable twice. With `layer_decay` (ELECTRA's and DeBERTa's
    fine-tuning recipes), each pair of groups is split by depth: the head (and what sits above
    the last layer) at the full rate, each layer below at the one above's times `layer_decay`,
    the embeddings lowest (`lr_scale`, which `set_lr` applies).
    """
    no_decay: set[int] = set()
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if name == "bias" or isinstance(module, (nn.LayerNorm, nn.RMSNorm)):
                no_decay.add(id(p))
    if layer_decay is None:
        decay, rest = [], []
        for p in model.parameters():  # deduplicated by nn.Module, in a stable order
            if p.requires_grad:
                (rest if id(p) in no_decay else decay).append(p)
        return [{"params": decay, "weight_decay": weight_decay},
                {"params": rest, "weight_decay": 0.0}]
    depths = layer_depths(model)
    top = max(depths.values(), default=-1) + 1
    groups: dict[tuple[int, bool], list] = {}
    for p in model.parameters():
        if p.requires_grad:
            groups.setdefault((depths.get(id(p), top), id(p) in no_decay), []).append(p)
    return [{"params": ps, "weight_decay": 0.0 if excluded else weight_decay,
             "lr_scale": layer_decay ** (top - depth)}
            for (depth, excluded), ps in sorted(groups.items())]


def no_decay_names(model: nn.Module) -> list[str]:
    """Names of the parameters trained without weight decay (for tests and logs)."""
    rest = {id(p) for p in param_groups(model, 0.0)[1]["params"]}
    return [n for n, p in model.named_parameters() if id(p) in rest]


def make_optimizer(model: nn.Module, lr: float, weight_decay: float = 0.01,
                   betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                   name: str = "adamw", layer_decay: float | None = None
                   ) -> torch.optim.Optimizer:
    """The registered optimizer `name` (train/optimizers.py) over `param_groups`. eps 1e-6 is
    BERT's (PyTorch defaults to 1e-8)."""
    optimizer = OPTIMIZERS.get_known(name).build(param_groups(model, weight_decay, layer_decay),
                                                 lr, betas, eps)
    set_lr(optimizer, lr)   # (each group's scale from the start)
    return optimizer


def adamw(groups: list[dict], lr: float, betas: tuple[float, float], eps: float):
    """AdamW's fused kernel updates all parameters in one pass: on CPU the default per-tensor
    implementation took 4-5x longer per step (a large share of a fine-tuning step on short
    sentences). It needs every parameter on one kind of device it supports."""
    devices = {p.device.type for g in groups for p in g["params"]}
    fused = len(devices) == 1 and devices <= {"cpu", "cuda"}
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused or None)


def lamb(groups: list[dict], lr: float, betas: tuple[float, float], eps: float):
    return Lamb(groups, lr=lr, betas=betas, eps=eps)


class Lamb(torch.optim.Optimizer):
    """LAMB (You et al., 2019, "Large Batch Optimization for Deep Learning"), as NVIDIA's BERT
    recipe runs it (apex FusedLAMB without `use_nvlamb`): Adam's bias-corrected moments give the
    update u = m^ / (sqrt(v^) + eps) + weight_decay * w, which is scaled per tensor by the trust
    ratio ||w|| / ||u|| (1 when either norm is 0) in groups with weight decay, and by 1 in the
    others (biases and LayerNorm, as apex leaves them): w <- w - lr * ratio * u. Gradient
    clipping is the training loop's (a global norm, as the recipe's max_grad_norm 1.0).

    Written with torch's foreach ops over each group's tensors: the same code on CPU and GPU,
    no host synchronisation in the step (the norms stay on the device).
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.0):
        if lr < 0 or eps < 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError("LAMB needs lr >= 0, eps >= 0 and betas in [0, 1)")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            beta1, beta2 = group["betas"]
            wd, lr, eps = group["weight_decay"], group["lr"], group["eps"]
            for p in params:
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            grads = [p.grad for p in params]
            m = [self.state[p]["exp_avg"] for p in params]
            v = [self.state[p]["exp_avg_sq"] for p in params]
            steps = [self.state[p]["step"] for p in params]
            torch._foreach_add_(steps, 1.0)
            t = float(steps[0])   # every tensor of a group steps together
            torch._foreach_lerp_(m, grads, 1 - beta1)
            torch._foreach_mul_(v, beta2)
            torch._foreach_addcmul_(v, grads, grads, value=1 - beta2)
            denom = torch._foreach_sqrt(torch._foreach_div(v, 1 - beta2 ** t))
            torch._foreach_add_(denom, eps)
            update = torch._foreach_div(torch._foreach_div(m, 1 - beta1 ** t), denom)
            if wd != 0:
                torch._foreach_add_(update, params, alpha=wd)
                w_norm = torch._foreach_norm(params)
                u_norm = torch._foreach_norm(update)
                ratios = [torch.where((w > 0) & (u > 0), w / u, torch.ones_like(w))
                          for w, u in zip(w_norm, u_norm)]
                torch._foreach_mul_(update, ratios)
            torch._foreach_add_(params, update, alpha=-lr)
        return loss


def warmup_steps(warmup: float, total_steps: int) -> int:
    """`warmup` < 1 is a fraction of the schedule's total steps, otherwise a step count, at
    most the total: a warm-up longer than the run would never reach its rate."""
    if warmup < 1:
        return int(round(warmup * total_steps))
    if warmup > total_steps:
        raise BertctlError(f"--warmup {warmup:g}: more steps than the run's {total_steps:,} "
                           f"(a fraction below 1, or a step count within the run)")
    return int(warmup)


WSD_DECAY = 0.1   # the share of a warm-up-stable-decay run spent decaying, unless given


def decay_steps(decay: float | None, total_steps: int, warmup: int) -> int:
    """--schedule wsd's decay length in steps: a fraction of the run below 1, else a step
    count; it must fit after the warm-up."""
    share = WSD_DECAY if decay is None else decay
    steps = int(share) if share >= 1 else int(round(share * total_steps))
    if steps + warmup > total_steps:
        raise BertctlError(f"--decay {share:g}: {steps:,} decay steps after {warmup:,} of "
                           f"warm-up are more than the run's {total_steps:,}")
    return max(steps, 1)


def _after_warmup(schedule: str, done: float, left_share: float, decay_share: float) -> float:
    """The share of the peak rate past the warm-up: `done` of the post-warm-up part gone
    (0 at its start), `left_share` of the whole run left, `decay_share` the WSD decay's."""
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * done))
    if schedule == "wsd":
        return min(1.0, left_share / decay_share)
    return 1.0   # constant


def lr_at(step: int, peak_lr: float, warmup: int, total_steps: int, schedule: str = "linear",
          decay: int = 1) -> float:
    """Learning rate of the update that takes the model from `step` to `step + 1` (0-based).

    Linear warm-up (peak * (step+1)/warmup) then the schedule, which ends at zero at
    `total_steps` (constant ends at its peak): the first update already moves (unlike a
    schedule that starts at exactly 0) and the last one of a decay uses its smallest positive
    rate (linear: peak/(total-warmup); wsd: peak/decay), so no update is wasted at either end.
    """
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    if step >= total_steps:
        return 0.0 if schedule != "constant" else peak_lr
    after = max(1, total_steps - warmup)
    if schedule == "linear":   # written as ever: the same rates to the last bit
        return peak_lr * (total_steps - step) / after
    return peak_lr * _after_warmup(schedule, (step - warmup) / after,
                                   (total_steps - step) / total_steps, decay / total_steps)


def lr_at_share(share: float, peak_lr: float, warmup: float, schedule: str = "linear",
                decay: float | None = None) -> float:
    """Learning rate at `share` (elapsed / budget) of a time budget: linear warm-up over the
    first `warmup` share, then the schedule to the budget's end (the step schedule's shape,
    laid over time as Cramming does)."""
    if share < warmup:
        return peak_lr * max(share, 1e-3 * warmup) / warmup
    if share >= 1:
        return 0.0 if schedule != "constant" else peak_lr
    if schedule == "linear":
        return peak_lr * (1 - share) / (1 - warmup)
    return peak_lr * _after_warmup(schedule, (share - warmup) / (1 - warmup), 1 - share,
                                   WSD_DECAY if decay is None else decay)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """The schedule's rate, scaled per group where layer-wise decay set a scale."""
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)


__all__ = ["Lamb", "decay_steps", "lr_at", "lr_at_share", "make_optimizer", "no_decay_names", "param_groups", "set_lr",
           "warmup_steps"]
