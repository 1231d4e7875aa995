"""The ops of a training step that make a GPU's host wait for the device, recorded on any
device: reads of a value, and ops whose output's size depends on the data (nonzero,
masked_select, boolean indexing, unique). The suite holds the step to none of them
(tests/train/test_host_syncs.py) and the GPU check counts them where it runs on a CPU
(benchmarks/speed/bench_gpu.py); on a GPU, torch.cuda.set_sync_debug_mode says the same.

Not seen on a CPU: a tensor made on a GPU from Python data (a copy from pageable memory,
which waits too); the step makes none (its constants are Python numbers, its counts tensors
the loader pins)."""

from __future__ import annotations

import traceback
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

WAITING_OPS = {"_local_scalar_dense", "nonzero", "masked_select", "is_nonzero", "equal",
               "_unique2", "unique_dim", "unique_consecutive", "masked_scatter", "argwhere",
               "repeat_interleave"}


def _boolean_index(func, args) -> bool:
    if func.overloadpacket.__name__ not in ("index", "index_put", "index_put_"):
        return False
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices)


def caller() -> str:
    """The line of bertctl that made the current call (folder/file:line)."""
    frames = [f for f in traceback.extract_stack() if "/bertctl/" in f.filename
              and not f.filename.endswith("train/waits.py")]
    f = frames[-1] if frames else traceback.extract_stack()[-3]
    return f"{Path(f.filename).parent.name}/{Path(f.filename).name}:{f.lineno}"


class HostWaits(TorchDispatchMode):
    """While active: the ops that make the host wait (`WAITING_OPS`, boolean indexing), each
    with the line of bertctl that called it (`found`)."""

    def __init__(self):
        super().__init__()
        self.found: list[tuple[str, str]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in WAITING_OPS or _boolean_index(func, args):
            self.found.append((name, caller()))
        return func(*args, **(kwargs or {}))


__all__ = ["HostWaits", "WAITING_OPS", "caller"]
