"""Scaled dot-product attention for every architecture: PyTorch's fused kernel, or on a CPU the
product written out where that is faster.

Why two: on a CPU the fused kernel (flash attention) is the faster one in fp32 at every
length, but its bf16 backward is slow on short sequences. On an AMD EPYC with AVX512-BF16 (no
AMX), one layer's forward and backward at batch 16, 4 heads of 64, 128 positions ran 1.3-2.2x
faster written out (benchmarks/speed/bench_attention.py; in the budget recipe's ModernBERT mini step
the fused kernel was 35% of the time); from 256 positions on the two were level or the fused
kernel won. Which one wins depends on the CPU's kernels, so it is not assumed: the first
training step of each shape times both and keeps the faster (as cuDNN's benchmark mode does),
and the written form is taken only where it clearly wins. Dropout on the attention
probabilities always takes the written form on a CPU: PyTorch has no fused CPU kernel with
dropout, and its fallback upcasts bf16 to fp32.

The two round differently, so the choice is the model's and the run's record (#65, #85):
each encoder holds one `AttentionPolicy` (its `attention_policy`, shared by its layers, as
transformers keeps `attn_implementation` on the model's config), which the training loop sets
from `--attention auto|fused|written`: auto as above, fused and written one form for every
call. The choices auto made are `choices()`, which the loop writes into each checkpoint and
the artifact's stats; a resumed run takes the recorded ones, and a distributed run's ranks
time nothing (each rank's batches differ, and so would their verdicts): auto there is the
fused kernel wherever the form is not asked. Nothing is process state: two models in one
process (a teacher beside its student, a generator beside its discriminator) each keep their
own.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from bertctl.errors import BertctlError
from bertctl.model import varlen
from bertctl.model.dropout import dropout

# Past this length the fused kernel won at every setting measured, and the written form's
# (B, heads, T, T) scores grow with T * T: not timed there.
WRITTEN_MAX_LENGTH = 512
# The written form must be this much faster to be taken: near a tie the choice could differ
# between two runs of one command, and with it the rounding of their results.
CLEAR_WIN = 0.8
MODES = ("auto", "fused", "written", "varlen")
VARLEN = "varlen"   # the key under which `choices` records that auto took it


class AttentionPolicy:
    """How one model's attention is computed: the mode (one of MODES), whether auto may time
    a shape, and the form auto took for each shape bucket. `varlen` False: the architecture's
    attention cannot take the variable-length kernel (DeBERTa's additive bias)."""

    def __init__(self, mode: str = "auto", varlen: bool = True):
        self.varlen_allowed = varlen
        self.configure(mode)

    def configure(self, mode: str = "auto", recorded: dict[str, str] | None = None,
                  timing: bool = True) -> None:
        """`mode` one of MODES; `recorded` the choices of the run being continued
        ({bucket: "written"|"fused"}, as `choices` gives them), taken as they are; `timing`
        False (a distributed run) leaves auto's unrecorded shapes to the fused kernel."""
        if mode not in MODES:
            raise ValueError(f"attention {mode!r}: one of {', '.join(MODES)}")
        if mode == "varlen" and not self.varlen_allowed:
            raise BertctlError("--attention varlen: this architecture's attention adds a bias "
                               "to every score (DeBERTa's relative positions), which the "
                               "variable-length kernel does not take; give fused or written")
        self.mode, self.timing = mode, timing
        self.varlen_taken = False
        self._chosen = {k: v == "written" for k, v in (recorded or {}).items() if k != VARLEN}

    def adopt(self, recorded: dict[str, str]) -> None:
        """Take a checkpoint's recorded choices over any made since the run started."""
        self._chosen.update({k: v == "written" for k, v in recorded.items() if k != VARLEN})

    def choices(self) -> dict[str, str]:
        """The choices auto has made: {shape bucket: "written" or "fused"}, and "varlen":
        "taken" where it took the variable-length kernel."""
        chosen = {k: "written" if v else "fused" for k, v in sorted(self._chosen.items())}
        return {**chosen, **({VARLEN: "taken"} if self.varlen_taken else {})}

    def wants_sequences(self, device: torch.device) -> bool:
        """Whether an encoder should find its batch's sequences (varlen.Sequences) for this
        policy: only where the variable-length path may run."""
        return self.varlen_allowed and (self.mode == "varlen" or (
            self.mode == "auto" and device.type == "cuda"))

    def takes_varlen(self, q: torch.Tensor, dropout_p: float, bias=None) -> bool:
        """Whether these queries take the variable-length path (auto: where PyTorch's kernel
        runs them; varlen: always, or one line where the attention has dropout)."""
        if self.mode == "varlen":
            if dropout_p > 0 or bias is not None:
                raise BertctlError("--attention varlen: the variable-length kernel has no "
                                   "dropout on the attention probabilities; set the model's "
                                   "attention dropout to 0")
            return True
        taken = (self.mode == "auto" and dropout_p == 0 and bias is None and varlen.supported(q)
                 and not torch.compiler.is_exporting())
        self.varlen_taken |= taken
        return taken

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               mask: torch.Tensor | varlen.Masked | None, dropout_p: float = 0.0,
               bias: torch.Tensor | None = None, scale: float | None = None,
               window: int | None = None) -> torch.Tensor:
        """softmax(q k^T * scale + bias where `mask` allows) v over (B, heads, T, d) tensors;
        `mask` is a boolean "may attend" mask that broadcasts to (B, heads, T, T), or None,
        or `varlen.Masked` (that mask with the batch's sequences: the variable-length path
        where it may run, within `window` positions each side where given); `bias` an
        additive one of scores' shape (DeBERTa's relative terms), or None; `scale` 1 /
        sqrt(d) unless given. `dropout_p` is the training dropout on the probabilities (0 in
        evaluation)."""
        if isinstance(mask, varlen.Masked):
            if mask.sequences is not None and self.takes_varlen(q, dropout_p, bias):
                return varlen.attend(q, k, v, mask.sequences, scale, window)
            mask = mask.dense
        if self.mode == "written" or (self.mode == "auto" and q.device.type == "cpu" and (
                dropout_p > 0 or self._written_is_faster(q, k, v, mask, bias, scale))):
            return written_attention(q, k, v, mask, dropout_p, bias, scale)
        return fused_attention(q, k, v, mask, dropout_p, bias, scale)

    def _written_is_faster(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           mask: torch.Tensor | None, bias: torch.Tensor | None = None,
                           scale: float | None = None) -> bool:
        """Whether the written form is the faster training step for this shape (timed once
        per shape and model). Only reduced-precision training is in question: in fp32 the
        fused kernel won everywhere measured, and without gradients (evaluation) the written
        form gained at most 1.26x, on the shortest rows, not worth a timing per shape."""
        T = q.size(-2)
        if (not worth_timing(q.dtype, T) or not torch.is_grad_enabled() or not q.requires_grad
                or torch.compiler.is_compiling() or torch.compiler.is_exporting()
                or torch.onnx.is_in_onnx_export()):
            return False
        # Lengths within 64 of each other share a choice, and so do batches within a factor
        # of two (both kernels' work grows with the batch alike): a packed batch's length and
        # row count vary from step to step, and each timing costs a few steps' attention.
        key = bucket(q, k, mask) + (" bias" if bias is not None else "")
        won = self._chosen.get(key)
        if won is None:
            extra = {} if bias is None else {"bias": bias, "scale": scale}
            won = self._chosen[key] = self.timing and clearly_faster(
                *time_both(q, k, v, mask, **extra))
        return won


def _lowest(q: torch.Tensor) -> float:
    # The lowest finite value rather than -inf where a key is masked: a row of -inf is NaN
    # after the softmax, and clearing NaN (nan_to_num) cost as much as the rest of the backward.
    # (Of the dtype the product runs in: under autocast an fp32 lowest would be -inf in bf16.)
    device = q.device.type
    return torch.finfo(torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device)
                       else q.dtype).min


def fused_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    mask: torch.Tensor | None, dropout_p: float = 0.0,
                    bias: torch.Tensor | None = None, scale: float | None = None
                    ) -> torch.Tensor:
    """PyTorch's kernel; an additive `bias` enters as its float mask, the masked keys at the
    lowest finite value (a row that may attend to nothing averages rather than NaN)."""
    if bias is not None:
        dtype = torch.get_autocast_dtype(q.device.type) \
            if torch.is_autocast_enabled(q.device.type) else q.dtype
        mask = (bias if mask is None else bias.masked_fill(~mask, _lowest(q))).to(dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                          scale=scale)


def written_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      mask: torch.Tensor | None, dropout_p: float = 0.0,
                      bias: torch.Tensor | None = None, scale: float | None = None
                      ) -> torch.Tensor:
    """The same attention as plain tensor operations. The softmax runs in the scores'
    precision, accumulating in fp32 (PyTorch's CPU kernel does); a row that may attend to
    nothing gives zeros, as the fused kernel's does."""
    lowest = _lowest(q)
    B, heads, T, d = q.shape
    alpha = d ** -0.5 if scale is None else scale
    if bias is not None:   # one pass: the scaled product added to the bias
        S = k.size(-2)
        scores = torch.baddbmm(bias.reshape(B * heads, T, S).to(q.dtype),
                               q.reshape(B * heads, T, d),
                               k.reshape(B * heads, S, d).transpose(1, 2),
                               alpha=alpha).view(B, heads, T, S)
        if mask is not None:
            scores = scores.masked_fill(~mask, lowest)
    elif mask is not None and mask.size(-2) == 1:
        # A padding mask (each row's keys, the same for every query) is added inside the
        # product, with the scale: one pass over the (B, heads, T, T) scores, where masking
        # them made another, forward and backward (that part 2-2.4x faster at MiniLM's shape,
        # one thread, bf16 and fp32). Masked scores are the lowest value either way.
        bias = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill_(~mask, lowest)
        S = k.size(-2)
        scores = torch.baddbmm(bias.expand(B, heads, 1, S).reshape(B * heads, 1, S),
                               q.reshape(B * heads, T, d),
                               k.reshape(B * heads, S, d).transpose(1, 2),
                               alpha=alpha).view(B, heads, T, S)
    else:
        scores = (q * alpha) @ k.transpose(-2, -1)
        if mask is not None:
            scores = scores.masked_fill(~mask, lowest)
    # Not an fp32 softmax cast back, as up to model revision 6: the product with v reads bf16
    # probabilities under autocast either way, so the forward is the same; the backward now
    # reads them rounded. At MiniLM's shape (32 x 12 heads x 128, bf16 autocast) that moved
    # the block's gradients' relative rms error against float64 from 0.59% to 0.61% (bf16's
    # products make the rest), and saved the two casts of the (B, heads, T, T) probabilities
    # each way: one layer's forward and backward 1.2-1.7x faster (model revision 7).
    probs = scores.softmax(-1)
    out = dropout(probs, dropout_p, True) @ v
    if mask is not None:   # a row with nothing to attend to averaged all: zeros instead
        out = out * mask.any(-1, keepdim=True)
    return out


def bucket(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None) -> str:
    """The shape bucket a choice holds for, as text (a checkpoint's and a manifest's key):
    rows up to a power of two, heads, length up to a multiple of 64, head size, self or
    cross attention, dtype, the mask's kind."""
    T = q.size(-2)
    kind = "none" if mask is None else "full" if mask.size(-2) > 1 else "keys"
    return (f"rows<{2 ** q.shape[0].bit_length()} heads{q.shape[1]} len<={-(-T // 64) * 64} "
            f"dim{q.shape[-1]} {'self' if k.size(-2) == T else 'cross'} "
            f"{str(q.dtype).removeprefix('torch.')} mask-{kind}")


def worth_timing(dtype: torch.dtype, length: int) -> bool:
    """Whether a training step of this precision and length is timed at all."""
    return dtype in (torch.bfloat16, torch.float16) and length <= WRITTEN_MAX_LENGTH


def clearly_faster(fused_s: float, written_s: float) -> bool:
    """Whether the written form's time wins by `CLEAR_WIN`."""
    return written_s < CLEAR_WIN * fused_s


def time_both(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
              repeats: int = 3, bias: torch.Tensor | None = None,
              scale: float | None = None) -> tuple[float, float]:
    """Seconds of one forward and backward of the fused kernel and of the written form, on
    copies of these inputs (the best of `repeats`, after one untimed run of each)."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    m = None if mask is None else mask.detach()
    extra = {} if bias is None else {"bias": bias.detach().clone().requires_grad_(),
                                     "scale": scale}

    def once(fn) -> float:
        t0 = time.perf_counter()
        fn(*leaves, m, **extra).float().sum().backward()
        return time.perf_counter() - t0

    def fused(a, b, c, mm, **more):
        return fused_attention(a, b, c, mm, **more)

    best = []
    # Saved as plain tensors: inside a checkpointed layer, the recomputation's hooks would
    # otherwise count this side computation's tensors as the layer's.
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        for fn in (fused, written_attention):
            once(fn)
            best.append(min(once(fn) for _ in range(repeats)))
    return best[0], best[1]


__all__ = ["MODES", "AttentionPolicy", "bucket", "clearly_faster", "fused_attention",
           "time_both", "worth_timing", "written_attention"]
