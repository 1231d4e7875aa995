"""What the machine runs fast: the `auto` precision and the default thread count.

bf16 autocast is several times faster than fp32 where matmuls run natively in bf16 (CPUs with
AMX or AVX512-BF16, CUDA devices that support it) and about 4x slower where it is emulated (a
CPU without those instructions), so `--precision auto` asks the hardware instead of baking one
machine's answer into a default. It never picks fp16: on CPU there is no fast fp16 path, and on
GPUs fp16 needs loss scaling, which a user should choose knowingly.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import os
import re
from pathlib import Path
from bertctl.errors import BertctlError
import contextlib

# torch is imported where it is asked: usable_cpus also serves the data builder, which does not
# load torch.


# The oldest torch whose APIs the code calls: torch.compiler.is_exporting (2.6), nn.RMSNorm
# and the device-type autocast queries (2.4). pyproject.toml declares the same floor.
TORCH_FLOOR = (2, 6)


def check_torch(version: str | None = None) -> None:
    """One line for a torch older than the floor, read from the installed package's metadata
    (importing torch would cost every command a second)."""
    if version is None:
        try:
            version = importlib.metadata.version("torch")
        except importlib.metadata.PackageNotFoundError:
            raise BertctlError("torch is not installed: pip install torch (bertctl needs "
                               f"{'.'.join(map(str, TORCH_FLOOR))} or newer)") from None
    found = re.match(r"(\d+)\.(\d+)", version)
    if found and (int(found[1]), int(found[2])) < TORCH_FLOOR:
        raise BertctlError(f"torch {version} is older than bertctl needs "
                           f"({'.'.join(map(str, TORCH_FLOOR))} or newer): pip install -U torch")


def cuda_wanted(device: str) -> bool:
    """Whether a `--device` setting (auto, cpu, cuda) runs on CUDA here."""
    import torch

    return device == "cuda" or (device == "auto" and torch.cuda.is_available())


# Overrides the detection: 1/0. For a CPU that reports the instructions but runs them slowly
# (some virtual machines), and for test suites that must resolve `auto` alike on every machine.
CPU_BF16_ENV = "BERTCTL_CPU_BF16"


def cpu_bf16_native() -> bool:
    """AMX tiles or AVX512-BF16 dot products, as torch detects them (or BERTCTL_CPU_BF16)."""
    import torch

    forced = os.environ.get(CPU_BF16_ENV, "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    probes = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")
    for name in probes:
        probe = getattr(torch.cpu, name, None)
        if probe is not None:
            try:
                if probe():
                    return True
            except RuntimeError:  # a build without the probe's backend
                continue
    return False


def auto_precision(device: str) -> str:
    """bf16 where this device's matmuls run natively in bf16, else fp32."""
    import torch

    if cuda_wanted(device):
        return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if cpu_bf16_native() else "fp32"


def describe() -> str:
    """One line for logs and benchmark tables: the CPU and what it runs natively."""
    import torch

    caps = getattr(torch.cpu, "get_capabilities", None)
    name = caps().get("cpu_name", "") if caps is not None else ""
    isa = torch.backends.cpu.get_cpu_capability()
    amx = getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)()
    bf16 = cpu_bf16_native()
    return (f"{name or 'CPU'} ({isa}, AMX {'yes' if amx else 'no'}, native bf16 "
            f"{'yes' if bf16 else 'no'}, {usable_cpus()} usable cores)")


def _cgroup_cpus() -> float | None:
    """The CPU quota of this process's cgroup (v2 cpu.max, else v1 cfs), in cores."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def usable_cpus() -> int:
    """The cores this process may use: its affinity mask, capped by a cgroup CPU quota (a
    container limited to 2 CPUs on a 64-core host must not start 64 threads)."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    quota = _cgroup_cpus()
    if quota is not None:
        n = min(n, max(1, int(quota)))
    return max(1, n)


def set_threads(threads: int | None) -> int:
    """A compute stage's CPU settings: freed memory held (`hold_freed_memory`) and intra-op
    threads: `threads` if given, at most the usable cores (more only contend, and tens of
    thousands crash the thread pool); else OMP_NUM_THREADS if the environment sets it (torch
    already honours it); else the usable cores, shared by the processes torchrun starts on
    this node. Returns the number of threads in force."""
    import torch

    hold_freed_memory()
    if threads is not None:
        threads = min(threads, usable_cpus())
    if threads is None and os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads()
    if threads is None:
        per_node = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
        threads = max(1, usable_cpus() // max(1, per_node))
    if threads != torch.get_num_threads():
        torch.set_num_threads(threads)
    return threads


# mallopt's parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
# Blocks up to this size come from the heap and stay there when freed: above the activations
# and gradients of the steps measured (a 128-pair MiniLM batch's fp32 attention scores: 100 MB).
HELD_BYTES = 1 << 30
HOLD_ENV = "BERTCTL_HOLD_MEMORY"   # "0": glibc's defaults (a process that must return memory)


def hold_freed_memory() -> bool:
    """Keep glibc's malloc from handing large freed blocks back to the kernel. By default it
    maps every block above a threshold (dynamic, at most 32 MB) afresh and unmaps it on free,
    so each step's large activations and gradients were new pages the kernel faulted in and
    zeroed, every step: on a 2-core AMD EPYC, one thread, the MiniLM retrieval step ran
    1.06-1.12x (32 pairs) and 1.39x (128 pairs) faster in bf16 with the blocks kept, BERT
    mini's and small's pretraining step 1.12-1.13x in bf16, mini's 1.04x in fp32, peak memory
    within 8% (docs/benchmarks.md, "Freed memory held"). The freed memory stays the process's
    for its next step, as a caching allocator's does; it is not a leak (the heap is reused,
    and trimmed past `HELD_BYTES` free at its top). Left alone where BERTCTL_HOLD_MEMORY=0,
    where the user sets these thresholds (MALLOC_MMAP_THRESHOLD_, GLIBC_TUNABLES'
    glibc.malloc.mmap_threshold, ...) and on another C library. Returns whether it was set."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    users_own = any(os.environ.get(f"MALLOC_{name.upper()}_") or f"glibc.malloc.{name}" in tunables
                    for name in ("mmap_threshold", "trim_threshold", "mmap_max"))
    if users_own or os.environ.get(HOLD_ENV, "1") == "0":
        return False
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return False
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, HELD_BYTES)
                    and libc.mallopt(_M_TRIM_THRESHOLD, HELD_BYTES))
    except (AttributeError, OSError, ValueError):   # not glibc (macOS, Windows, musl)
        return False


def resolve_device(device: str, local_rank: int = 0):
    """The torch device of a `--device` setting: "auto" picks the local GPU when there is one
    (cuda:LOCAL_RANK under torchrun), "cuda" insists on it."""
    import torch

    if device not in ("auto", "cpu", "cuda"):
        raise BertctlError(f"device must be auto, cpu or cuda, got {device!r}")
    if not cuda_wanted(device):
        return torch.device("cpu")

    if not torch.cuda.is_available():
        raise BertctlError("--device cuda: no CUDA device is available (use auto or cpu)")
    if local_rank >= torch.cuda.device_count():
        raise BertctlError(f"LOCAL_RANK {local_rank} but only {torch.cuda.device_count()} GPU(s) "
                           f"are visible; start torchrun with --nproc_per_node <= that")
    return torch.device("cuda", local_rank)


def autocast(device, precision: str):
    """The autocast context of a precision name for a device: none for fp32, bf16 or fp16
    (the latter for GPUs) otherwise; shared by training and inference."""

    import torch

    if precision == "fp32":
        return contextlib.nullcontext()
    if precision not in ("bf16", "fp16"):
        raise ValueError(f"precision must be fp32, bf16 or fp16, got {precision!r}")
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype)


def to_device(batch: dict, device) -> dict:
    """A batch's tensors on `device` (non-blocking: from pinned memory the copy overlaps
    compute); other values as they are."""
    import torch

    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
            for k, v in batch.items()}


def check_precision(precision: str, device) -> None:
    """The precision a stage asked for can run on `device` (training and inference alike)."""
    import torch

    if precision == "fp16" and device.type != "cuda":
        raise BertctlError("--precision fp16 needs a CUDA GPU; on a CPU use bf16")
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise BertctlError("--precision bf16: this GPU does not support it; use fp16")
