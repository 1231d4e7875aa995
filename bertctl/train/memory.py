"""Fitting a training step to the memory the machine has, before the first step.

A CPU has no out-of-memory error to catch: a step that needs more than the machine has is
killed by the kernel (exit 137) after minutes of silence. So the loop predicts. What a step
needs beyond what is already resident is the gradients and the optimizer's state (known from
the parameters) plus the activations autograd keeps for the backward pass, which grow with the
rows of a micro-batch. Those are measured, not modelled: the model's forward runs on a few of
the longest training rows at two sizes with a hook counting every tensor saved for backward
(so any architecture, objective, precision and gradient checkpointing is measured as it will
run), and the difference gives the bytes per row.

Where the micro-batch the settings give does not fit and the user did not choose it, the loop
takes the largest micro-batch that does (the batch size, and so the updates, unchanged: the
gradients accumulate), says so in one line and records it. Where the user chose it, or not even
one row fits, or the model's loss compares the rows of a batch (in-batch negatives: a smaller
micro-batch would change it), it refuses in one line with the figures and the flag to change.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from bertctl import hardware
from bertctl.data.collate import without_full_mask
from bertctl.errors import BertctlError
from bertctl.train import distributed as dist
from bertctl.train.order import check_fits

# The saved tensors are not the whole peak: the backward pass holds a layer's input gradients
# beside them, the forward pass short-lived products (attention scores, the vocabulary's
# logits before the loss reduces them), and the allocator keeps freed blocks. Measured against
# the peak resident memory of one step (forward, backward, AdamW) on an AVX512 CPU: BERT and
# ModernBERT base, fp32 and bf16, micro-batches 32-64 of 128 tokens, 0.76-1.18x the saved
# activations; mini 1.2-1.6x, which the reserve below covers (mini's activations are small).
ACTIVATION_MARGIN = 1.25
# Gradient checkpointing keeps each layer's input and recomputes the layer in the backward
# pass; the probe counts the tensors saved without it (the checkpoint's own hooks hide the
# rest), and a checkpointed step peaked at 0.33-0.47x those (BERT base, fp32, micro-batches
# 16-64: the recomputed layer and the allocator's blocks), planned as 0.6x.
CHECKPOINTED_SHARE = 0.6
# Bytes of optimizer state per byte of trained weights: AdamW and LAMB keep two moments.
OPTIMIZER_STATES = 2
# What the OS, the data loader and the interpreter keep besides: never plan the last of it.
RESERVE_BYTES = 512 * 2**20
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
    fixed_bytes: int           # saved activations that do not grow with the rows
    row_bytes: int             # saved activations per row, measured
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
        return int(torch.cuda.mem_get_info(device)[0])
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


def state_bytes(model: nn.Module) -> int:
    """Gradients and optimizer moments of the trained weights."""
    trained = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return trained * (1 + OPTIMIZER_STATES)


def saved_bytes(model: nn.Module, batch: dict, device: torch.device, precision: str) -> int:
    """Bytes of the tensors autograd saves for backward in one forward pass over `batch`
    (each storage once; the weights themselves not: they are resident already)."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr and ptr not in weights:
            seen[ptr] = max(seen.get(ptr, 0), storage.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):   # (nothing is kept)
        with hardware.autocast(device, precision):
            out = model(**hardware.to_device(batch, device))
    del out   # the graph goes with it
    return sum(seen.values())


def probe_rows(data, rows: int) -> list[int]:
    """The `rows` longest training examples (the worst micro-batch), or the first ones where
    the data does not say its lengths (pretraining rows are all of one length)."""
    lengths = getattr(data, "lengths", None)
    if lengths is None:
        return list(range(rows))
    values = np.asarray(lengths() if callable(lengths) else lengths)
    return [int(i) for i in np.argsort(-values, kind="stable")[:rows]]


def measure(model: nn.Module, data, device: torch.device,
            precision: str) -> tuple[int, int, int]:
    """(bytes not per row, bytes per row, sequences per row) of a forward pass's saved
    activations, from the longest rows at two sizes, unchunked (see `fit_to_memory`). Its
    dropout draws do not matter: the loop seeds every RNG (or restores a checkpoint's) after
    this, before the first step."""
    small = 1 if len(data) < 4 else 2
    sizes = (small, 2 * small) if len(data) >= 2 * small else (1, 1)
    rows = probe_rows(data, sizes[-1])
    was_training, chunk = model.training, getattr(model, "cache_negatives", 0)
    model.train()
    try:
        if chunk:
            model.cache_negatives = 0
        batches = [without_full_mask(data.batch(rows[:n], 0)) for n in sizes]
        counts = [saved_bytes(model, b, device, precision) for b in batches]
    finally:
        model.train(was_training)
        if chunk:
            model.cache_negatives = chunk
    ids = batches[0].get("input_ids")
    per_sequence = ids.shape[1] if ids is not None and ids.dim() == 3 else 1
    if sizes[0] == sizes[1]:
        return 0, counts[0], per_sequence
    per_row = max(0, (counts[1] - counts[0]) // (sizes[1] - sizes[0]))
    return max(0, counts[0] - sizes[0] * per_row), per_row, per_sequence


def choose(asked: int, given: bool, state: int, fixed: int, per_row: int, available: int,
           splittable: bool = True, live_rows=None, hint: str = "",
           checkpointing: bool = False, parameters: int = 0) -> MemoryFit:
    """The micro-batch to train with: `asked` where it fits; else, where the user did not
    choose it and the loss does not compare rows, the largest divisor of it that fits; else a
    BertctlError with the figures and what to change."""
    live = live_rows or (lambda rows: rows)
    share = ACTIVATION_MARGIN * (CHECKPOINTED_SHARE if checkpointing else 1)

    def need(rows: int) -> int:
        return state + int(share * (fixed + live(rows) * per_row)) + RESERVE_BYTES

    fitting = [d for d in range(asked, 0, -1) if asked % d == 0 and need(d) <= available]
    chosen = fitting[0] if fitting else 0
    if chosen == asked or (chosen and not given and splittable):
        return MemoryFit(chosen, asked, need(chosen), available, state, fixed, per_row,
                         parameters)
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


def fit_to_memory(model: nn.Module, data, settings, device: torch.device, world: int,
                  on_log=None) -> MemoryFit:
    """The micro-batch of a run (announced through on_log). Every process measures; they
    plan with the least memory any has, so all choose alike.

    Two attributes of a model change the plan. `compares_rows` (text: the flag that lowers its
    memory instead) says its loss compares the rows of a batch (in-batch negatives), which a
    smaller micro-batch would change. `cache_negatives` (N > 0) says it embeds a batch N
    sequences at a time and back-propagates a chunk at a time (GradCache): the probe runs it
    unchunked, and the plan holds one chunk's activations."""
    s = settings
    asked = s.micro_batch_size or s.batch_size // world
    if asked < 1 or s.batch_size % (asked * world):
        raise BertctlError(f"train settings: batch_size {s.batch_size} is not a multiple of "
                           f"micro_batch_size {asked} x {world} process(es)")
    check_fits(len(data), s.batch_size)   # what the data and settings alone decide, first
    compares = getattr(model, "compares_rows", None)
    if compares is not None and asked * world < s.batch_size:
        # What the data and settings alone decide, before anything is measured: the loss of
        # a micro-batch would compare its rows only, not the batch's the manifest records.
        raise BertctlError(f"--micro-batch-size {asked}: this loss compares the rows of a "
                           f"batch (in-batch negatives), which micro-batches of {asked} would "
                           f"split from the batch of {s.batch_size}; give {compares}")
    fixed, per_row, per_sequence = measure(model, data, device, s.precision)
    available = available_bytes(device)
    if dist.active():   # the same rows measure the same on every rank: only this may differ
        available = min(int(a) for a in dist.all_gather_object(available))
    chunk = getattr(model, "cache_negatives", 0)
    fit = choose(asked, s.micro_batch_size is not None, state_bytes(model), fixed, per_row,
                 available, splittable=compares is None,
                 live_rows=(lambda r: min(r, chunk / per_sequence)) if chunk else None,
                 hint=compares or "", checkpointing=s.gradient_checkpointing,
                 parameters=sum(p.numel() for p in model.parameters()))
    if on_log is not None:
        on_log({"split": "note", "text": fit.message()})
    return fit
