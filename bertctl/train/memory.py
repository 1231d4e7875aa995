"""Fitting a training step to the memory the machine has, before the first step.

A CPU has no out-of-memory error to catch: a step that needs more than the machine has is
killed by the kernel (exit 137) after minutes of silence. So the loop predicts. What a step
needs beyond what is already resident is the gradients and the optimizer's state (known from
the parameters) plus the tensors its forward and backward passes hold at their peak, which
grow with the rows of a micro-batch. Those are measured, not modelled: one forward and
backward runs on the longest training rows at one and two rows with every tensor an operation
creates counted while it lives (`PeakBytes`), so any architecture, objective, precision,
sequence length and gradient checkpointing is measured as it will run: the activations saved
for backward, and the short-lived products beside them (attention scores, the vocabulary's
logits and their gradient, the recomputed layer), which at long sequences are most of it.
The difference gives the bytes per row.

Where the micro-batch the settings give does not fit and the user did not choose it, the loop
takes the largest micro-batch that does (the batch size, and so the updates, unchanged: the
gradients accumulate), says so in one line and records it. Where the user chose it, or not even
one row fits, or the model's loss compares the rows of a batch (in-batch negatives: a smaller
micro-batch would change it), it refuses in one line with the figures and the flag to change.
"""

from __future__ import annotations

import os
import weakref
from difflib import SequenceMatcher
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from bertctl import hardware
from bertctl.data.collate import without_full_mask
from bertctl.errors import BertctlError
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from bertctl.train import distributed as dist
from bertctl.train.order import check_fits

# The tensors counted are not the whole of the process's growth: the allocator keeps freed
# blocks, and small tensors share pages. Measured against the peak resident memory of one step
# (benchmarks/speed/bench_memory_fit.py): see docs/benchmarks.md for the ratios it covers.
ACTIVATION_MARGIN = 1.25
# Bytes of optimizer state per byte of trained weights: AdamW and LAMB keep two moments.
OPTIMIZER_STATES = 2
# What the OS, the data loader and the interpreter keep besides: never plan the last of it.
RESERVE_BYTES = 512 * 2**20
# A GPU's share left to its caching allocator's fragmentation (not calibrated on a GPU yet:
# PyTorch's allocator rounds blocks up to 512 bytes and 2 MB segments; 5% of an 80 GB card is
# 4 GB).
CUDA_FRAGMENTATION = 0.05
# Bytes of an optimizer's temporaries during its step, per byte of trained weights: AdamW's
# fused kernel makes none; LAMB's foreach ops hold the denominator and the update (optim.Lamb).
OPTIMIZER_TEMPORARIES = {"adamw": 0, "lamb": 2}
# Overrides the detection (bytes, or with a unit: 8GB, 512MB): for a machine shared with other
# jobs, whose free memory now is not what this run may take.
MEMORY_ENV = "BERTCTL_MEMORY"


@dataclass(frozen=True)
class MemoryFit:
    micro_batch_size: int      # chosen
    asked: int                 # the settings' micro-batch (batch / processes if not given)
    need_bytes: int            # predicted for a step at the chosen micro-batch, per process
    available_bytes: int       # per process
    state_bytes: int           # gradients and optimizer moments
    fixed_bytes: int           # step tensors that do not grow with the rows, at its peak
    row_bytes: int             # step tensors per row there, measured
    parameters: int = 0

    def message(self) -> str:
        """Said before the first step (a base model's first step can take minutes)."""
        change = (f"micro-batch {self.asked} does not fit; micro-batches of "
                  f"{self.micro_batch_size} accumulate to the same batch"
                  if self.micro_batch_size != self.asked else f"micro-batch {self.asked}")
        return (f"memory: {self.parameters / 1e6:,.1f}M parameters, {change}: a step needs "
                f"about {_gb(self.need_bytes)} of the {_gb(self.available_bytes)} available")


def _gb(n: float) -> str:
    return f"{n / 2**30:.1f} GB"


def parse_size(text: str) -> int:
    """'8GB', '512MB', '1.5G' or bytes -> bytes."""
    t = text.strip().upper().removesuffix("B")
    scale = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}.get(t[-1:], 1)
    try:
        value = float(t[:-1] if scale > 1 else t)
    except ValueError:
        raise BertctlError(f"{MEMORY_ENV}={text!r}: not a size (give e.g. 8GB, 512MB or "
                           f"bytes)") from None
    if value <= 0:
        raise BertctlError(f"{MEMORY_ENV}={text!r}: must be above 0")
    return int(value * scale)


def available_bytes(device: torch.device) -> int:
    """What this process may still take: a GPU's free memory, or on a CPU the kernel's
    MemAvailable capped by the cgroup's limit, shared by the processes torchrun starts on
    this node (BERTCTL_MEMORY overrides)."""
    forced = os.environ.get(MEMORY_ENV, "").strip()
    if forced:
        return parse_size(forced)
    if device.type == "cuda":
        # What the caching allocator holds but no tensor uses is free to this process, not
        # to mem_get_info: return it first. A share of the card stays unplanned for the
        # allocator's fragmentation (blocks of one size that a step of another cannot reuse).
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info(device)
        return max(0, int(free) - int(CUDA_FRAGMENTATION * total))
    free = [v for v in (_meminfo_available(), _cgroup_free()) if v is not None]
    if not free:
        return 1 << 62   # nothing to read (not Linux): do not refuse on a guess
    per_node = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    return min(free) // per_node


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def _cgroup_free() -> int | None:
    """A cgroup's limit minus what it uses (its reclaimable page cache not counted as used)."""
    for limit, usage, base in (("memory.max", "memory.current", "/sys/fs/cgroup"),
                               ("memory.limit_in_bytes", "memory.usage_in_bytes",
                                "/sys/fs/cgroup/memory")):
        try:
            with open(f"{base}/{limit}", encoding="ascii") as f:
                cap = f.read().strip()
            with open(f"{base}/{usage}", encoding="ascii") as f:
                used = int(f.read())
        except (OSError, ValueError):
            continue
        if cap == "max" or int(cap) >= 1 << 60:
            return None
        cache = 0
        try:
            with open(f"{base}/memory.stat", encoding="ascii") as f:
                for line in f:
                    if line.startswith(("inactive_file ", "total_inactive_file ")):
                        cache = int(line.split()[1])
        except (OSError, ValueError):
            pass
        return max(0, int(cap) - used + cache)
    return None


def state_bytes(model: nn.Module, optimizer: str = "adamw") -> int:
    """Gradients (under torchrun, DDP's buckets: the gradients are views of them), optimizer
    moments and the optimizer step's temporaries, of the trained weights. (The temporaries
    come after the backward's activations are freed; counted beside them, the plan errs on
    the side of fitting.)"""
    trained = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return trained * (1 + OPTIMIZER_STATES + OPTIMIZER_TEMPORARIES.get(optimizer, 2))


class PeakBytes(TorchDispatchMode):
    """While active: the bytes of the tensors every operation creates (each storage once,
    from its creation until it is freed), their peak, and after each operation its name and
    the bytes then held (`trace`). Tensors made before (the weights, the batch, gradients
    already there) are not counted."""

    def __init__(self):
        super().__init__()
        self.live = self.peak = 0
        self.ops: list[str] = []
        self.trace: list[int] = []
        self._held: dict[int, weakref.ref] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        given = {_storage_ptr(t) for t in tree_leaves((args, kwargs))
                 if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and _storage_ptr(t) not in given:
                self._count(t.untyped_storage())   # (an in-place result is its input)
        self.ops.append(str(func))
        self.trace.append(self.live)
        return out

    def _count(self, storage) -> None:
        ptr = storage.data_ptr()
        if not ptr or ptr in self._held:   # a view of one counted already
            return
        size = storage.nbytes()

        def freed(_, ptr=ptr, size=size):
            if self._held.pop(ptr, None) is not None:
                self.live -= size

        self._held[ptr] = weakref.ref(storage, freed)
        self.live += size
        self.peak = max(self.peak, self.live)


def _storage_ptr(t: torch.Tensor) -> int:
    return 0 if t.device.type == "meta" else t.untyped_storage().data_ptr()


def step_trace(model: nn.Module, batch: dict, device: torch.device, precision: str) -> PeakBytes:
    """One training step's forward and backward passes over `batch` under `PeakBytes`, the
    gradients already allocated (as from the second step on: the plan counts them in the
    state)."""
    batch = hardware.to_device(batch, device)
    trained = [p for p in model.parameters() if p.requires_grad]
    for p in trained:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    try:
        with PeakBytes() as live:
            with hardware.autocast(device, precision):
                out = model(**batch)
            out["loss"].float().backward()
            del out   # the graph goes with it
        return live
    finally:
        for p in trained:
            p.grad = None


def step_bytes(model: nn.Module, batch: dict, device: torch.device, precision: str) -> int:
    """The peak bytes of the tensors one training step over `batch` creates."""
    return step_trace(model, batch, device, precision).peak


def envelope(small: PeakBytes, large: PeakBytes, sizes: tuple[int, int]
             ) -> tuple[np.ndarray, np.ndarray]:
    """(fixed, per_row) arrays whose max(fixed + rows * per_row) is a step's peak at any
    number of rows. The same operations at two sizes: each moment of the step grows linearly
    with the rows, at its own rate, and the peak at many rows is a moment the small probes do
    not peak at (the start of the backward, not the weights' gradients at its end): every
    moment is extrapolated, the dominated ones dropped."""
    if sizes[0] == sizes[1]:
        return np.zeros(1), np.asarray([max(small.peak, large.peak) / sizes[0]])
    # The moments matched by the operations' names (a step at more rows may take a few
    # operations more or fewer, e.g. where it selects the predicted positions), and the two
    # peaks.
    blocks = SequenceMatcher(None, small.ops, large.ops, autojunk=False).get_matching_blocks()
    pairs = [(i + k, j + k) for i, j, n in blocks for k in range(n)]
    a = np.asarray([small.trace[i] for i, _ in pairs] + [small.peak], np.float64)
    b = np.asarray([large.trace[j] for _, j in pairs] + [large.peak], np.float64)
    per_row = np.maximum(0.0, (b - a) / (sizes[1] - sizes[0]))
    fixed = np.maximum(0.0, a - sizes[0] * per_row)
    order = np.lexsort((-fixed, -per_row))     # by rate, then fixed part, both descending
    keep, best = [], -1.0
    for i in order:                            # a moment no other moment exceeds at any rows
        if fixed[i] > best:
            keep.append(i)
            best = fixed[i]
    return fixed[keep], per_row[keep]


def probe_rows(data, rows: int) -> list[int]:
    """The `rows` longest training examples (the worst micro-batch), or the first ones where
    the data does not say its lengths (pretraining rows are all of one length)."""
    lengths = getattr(data, "lengths", None)
    if lengths is None:
        return list(range(rows))
    values = np.asarray(lengths() if callable(lengths) else lengths)
    return [int(i) for i in np.argsort(-values, kind="stable")[:rows]]


def step_envelope(model: nn.Module, data, device: torch.device, precision: str,
            most: int = 2) -> tuple[np.ndarray, np.ndarray, int]:
    """(fixed bytes, bytes per row, sequences per row) of a training step's tensors at each
    moment of it (`envelope`), from the longest rows at one and two rows, or two and three
    where the micro-batch (`most`) is three or more or the loss compares rows: the probe
    needs about what a small step needs. Unchunked (see `fit_to_memory`). Its dropout draws
    do not matter: the loop seeds every RNG (or restores a checkpoint's) after this, before
    the first step."""
    least = 2 if getattr(model, "compares_rows", None) is not None or most >= 3 else 1
    least = min(len(data), least)
    sizes = (least, least + 1) if len(data) > least else (least, least)
    rows = probe_rows(data, sizes[-1])
    was_training, chunk = model.training, getattr(model, "cache_negatives", 0)
    model.train()
    try:
        if chunk:
            model.cache_negatives = 0
        batches = [without_full_mask(data.batch(rows[:n], 0)) for n in sizes]
        traces = [step_trace(model, b, device, precision) for b in batches]
    finally:
        model.train(was_training)
        if chunk:
            model.cache_negatives = chunk
    ids = batches[0].get("input_ids")
    per_sequence = ids.shape[1] if ids is not None and ids.dim() == 3 else 1
    fixed, per_row = envelope(*traces, sizes)
    return fixed, per_row, per_sequence


def micro_batch_that_fits(asked: int, given: bool, state: int, fixed, per_row, available: int,
           splittable: bool = True, live_rows=None, hint: str = "",
           checkpointing: bool = False, parameters: int = 0) -> MemoryFit:
    """The micro-batch to train with: `asked` where it fits; else, where the user did not
    choose it and the loss does not compare rows, the largest divisor of it that fits; else a
    BertctlError with the figures and what to change. `fixed` and `per_row`: bytes, or arrays
    of them (a step's moments, `envelope`), whose largest sum is the step's peak."""
    live = live_rows or (lambda rows: rows)
    fixed, per_row = np.atleast_1d(fixed), np.atleast_1d(per_row)

    def tensors(rows: int) -> int:   # the step's peak: its largest moment at these rows
        return int(np.max(fixed + live(rows) * per_row))

    def need(rows: int) -> int:
        return state + int(ACTIVATION_MARGIN * tensors(rows)) + RESERVE_BYTES

    fitting = [d for d in range(asked, 0, -1) if asked % d == 0 and need(d) <= available]
    chosen = fitting[0] if fitting else 0
    if chosen == asked or (chosen and not given and splittable):
        at = int(np.argmax(fixed + live(chosen) * per_row))   # the moment that peaks there
        return MemoryFit(chosen, asked, need(chosen), available, state, int(fixed[at]),
                         int(per_row[at]), parameters)
    if not splittable:
        way = hint or "a smaller --batch-size"
    elif chosen:
        way = f"give --micro-batch-size {chosen} (the same batch, its gradients accumulated)"
    else:
        way = (f"even one row needs about {_gb(need(1))}: a smaller model or sequence length"
               + ("" if checkpointing else ", or --gradient-checkpointing"))
    raise BertctlError(f"memory: a training step at micro-batch {asked} needs about "
                       f"{_gb(need(asked))} and this machine has {_gb(available)} available: "
                       f"{way}")


def fit_to_memory(model: nn.Module, data, settings, batch_size: int, device: torch.device,
                  world: int, on_log=None) -> MemoryFit:
    """The micro-batch of a run's global batch of `batch_size` (announced through on_log).
    Every process measures; they plan with the least memory any has, so all choose alike.

    Two attributes of a model change the plan. `compares_rows` (text: the flag that lowers its
    memory instead) says its loss compares the rows of a batch (in-batch negatives), which a
    smaller micro-batch would change. `cache_negatives` (N > 0) says it embeds a batch N
    sequences at a time and back-propagates a chunk at a time (GradCache): the probe runs it
    unchunked, and the plan holds one chunk's activations."""
    s = settings
    asked = s.micro_batch_size or batch_size // world
    if asked < 1 or batch_size % (asked * world):
        raise BertctlError(f"train settings: batch_size {batch_size} is not a multiple of "
                           f"micro_batch_size {asked} x {world} process(es)")
    check_fits(len(data), batch_size)   # what the data and settings alone decide, first
    compares = getattr(model, "compares_rows", None)
    if compares is not None and asked * world < batch_size:
        # What the data and settings alone decide, before anything is measured: the loss of
        # a micro-batch would compare its rows only, not the batch's the manifest records.
        raise BertctlError(f"--micro-batch-size {asked}: this loss compares the rows of a "
                           f"batch (in-batch negatives), which micro-batches of {asked} would "
                           f"split from the batch of {batch_size}; give {compares}")
    fixed, per_row, per_sequence = step_envelope(model, data, device, s.precision, asked)
    available = available_bytes(device)
    if dist.active():   # the same rows measure the same on every rank: only this may differ
        available = min(int(a) for a in dist.all_gather_object(available))
    chunk = getattr(model, "cache_negatives", 0)
    fit = micro_batch_that_fits(asked, s.micro_batch_size is not None, state_bytes(model, s.optimizer), fixed,
                 per_row, available, splittable=compares is None,
                 live_rows=(lambda r: min(r, chunk / per_sequence)) if chunk else None,
                 hint=compares or "", checkpointing=s.gradient_checkpointing,
                 parameters=sum(p.numel() for p in model.parameters()))
    if on_log is not None:
        on_log({"split": "note", "text": fit.message()})
    return fit
