"""`--precision auto` and the default thread count (bertctl.hardware)."""

import json
import re
from pathlib import Path
import os

import pytest
import torch

from bertctl import hardware
from bertctl.errors import BertctlError
from bertctl.stages.settings.eval import EvalSettings
from bertctl.stages.settings.finetune import FinetuneSettings
from bertctl.stages.settings.pretrain import PretrainSettings
from bertctl.settings import SettingsError, identity
from bertctl.train.settings import LoopSettings


@pytest.fixture
def cpu_probes(monkeypatch):
    """Pretend torch detected (or not) AMX / AVX512-BF16, with no override in the environment."""
    monkeypatch.delenv(hardware.CPU_BF16_ENV, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)

    def set_probes(amx: bool, avx512_bf16: bool):
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16,
                            raising=False)
    return set_probes


@pytest.mark.parametrize("amx, avx512_bf16, expected", [
    (True, False, "bf16"), (False, True, "bf16"), (True, True, "bf16"), (False, False, "fp32")])
def test_auto_follows_the_cpu(cpu_probes, amx, avx512_bf16, expected):
    cpu_probes(amx, avx512_bf16)
    assert hardware.auto_precision("auto") == expected
    assert hardware.auto_precision("cpu") == expected
    for config in (FinetuneSettings(), EvalSettings(), PretrainSettings(steps=2)):
        assert config.precision == "auto"   # made without a probe of the machine ...
        assert config.resolved().precision == expected   # ... resolved by the stage


def test_explicit_precision_and_code_defaults_are_kept(cpu_probes):
    cpu_probes(True, True)
    assert FinetuneSettings(precision="fp32").resolved().precision == "fp32"
    assert EvalSettings(precision="fp32").resolved().precision == "fp32"
    assert LoopSettings(steps=1).precision == "fp32"  # code says what it wants
    with pytest.raises(SettingsError):   # and never auto: the stage resolved it
        LoopSettings(steps=1, precision="auto")
    cpu_probes(False, False)
    assert PretrainSettings(steps=2, precision="bf16").resolved().precision == "bf16"


def test_never_fp16_and_cuda_without_bf16_is_fp32(cpu_probes, monkeypatch):
    cpu_probes(True, True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert hardware.auto_precision("auto") == "fp32"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert hardware.auto_precision("cuda") == "bf16"
    assert hardware.auto_precision("cpu") == "bf16"  # --device cpu asks the CPU, not the GPU


def test_the_id_hashes_the_resolved_precision(cpu_probes):
    cpu_probes(False, False)
    fp32 = FinetuneSettings().resolved()
    cpu_probes(False, True)
    bf16 = FinetuneSettings().resolved()
    assert identity(fp32)["precision"] == "fp32" and identity(bf16)["precision"] == "bf16"
    assert identity(FinetuneSettings(precision="fp32")) == identity(fp32)
    assert "threads" not in identity(fp32)  # how fast, not what


def test_environment_override(monkeypatch):
    for value, native in (("1", True), ("0", False)):
        monkeypatch.setenv(hardware.CPU_BF16_ENV, value)
        assert hardware.cpu_bf16_native() is native


def test_usable_cpus_honours_the_cgroup_quota(monkeypatch):
    monkeypatch.setattr(hardware.os, "sched_getaffinity", lambda pid: set(range(64)),
                        raising=False)
    monkeypatch.setattr(hardware, "_cgroup_cpus", lambda: 2.5)
    assert hardware.usable_cpus() == 2
    monkeypatch.setattr(hardware, "_cgroup_cpus", lambda: None)
    assert hardware.usable_cpus() == 64
    monkeypatch.setattr(hardware, "_cgroup_cpus", lambda: 0.5)
    assert hardware.usable_cpus() == 1


def test_set_threads(monkeypatch):
    before = torch.get_num_threads()
    try:
        monkeypatch.setattr(hardware, "usable_cpus", lambda: 4)
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # two torchrun processes share the node
        assert hardware.set_threads(None) == 2 == torch.get_num_threads()
        assert hardware.set_threads(1) == 1 == torch.get_num_threads()
        monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the environment's choice stands
        assert hardware.set_threads(None) == torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


HOLD_PROBE = """
import ctypes, sys, torch
from bertctl import hardware
from bertctl.errors import BertctlError
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                                "usmblks", "fsmblks", "uordblks", "fordblks",
                                                "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
held = hardware.set_threads(1) and hardware.hold_freed_memory()
before = libc.mallinfo2().hblkhd
block = torch.empty(256 << 20, dtype=torch.uint8)
print(held, libc.mallinfo2().hblkhd - before)
"""


@pytest.mark.skipif(not hasattr(os, "confstr") or not os.confstr("CS_GNU_LIBC_VERSION"),
                    reason="glibc's malloc only")
@pytest.mark.parametrize("environment, held", [
    ({}, True), ({"MALLOC_MMAP_THRESHOLD_": "65536"}, False),
    ({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"}, False),
    ({"BERTCTL_HOLD_MEMORY": "0"}, False)])
def test_a_stage_keeps_large_blocks_on_the_heap(environment, held):
    """A 256 MB tensor is mapped from the kernel (malloc's mmapped bytes grow by it) unless the
    stage's settings hold freed memory; a user's own malloc thresholds are left alone."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MALLOC_") and k not in ("GLIBC_TUNABLES", hardware.HOLD_ENV)}
    out = subprocess.run([sys.executable, "-c", HOLD_PROBE], env={**env, **environment},
                         capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == str(held)
    assert (int(out[1]) == 0) == held, out   # mapped afresh: the whole block


def test_manifest_records_the_resolved_precision(sst2_seed_runs):
    model, _, ev = sst2_seed_runs
    for path in (model, ev):
        config = json.loads((path / "artifact.json").read_text())["config"]
        assert config["precision"] == "fp32"  # auto, resolved under BERTCTL_CPU_BF16=0


def test_threads_are_bounded_by_the_usable_cores():
    """`--threads 100000` crashed the process (a segfault in the thread pool's first matmul):
    a count above the usable cores is bounded to them (issue #26, item 10)."""
    import subprocess
    import sys

    code = ("import torch; from bertctl import hardware; n = hardware.set_threads(100000); "
            "x = torch.randn(256, 256); float((x @ x).sum()); "
            "print(n, hardware.usable_cpus(), torch.get_num_threads())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-500:])
    n, usable, in_force = map(int, done.stdout.split())
    assert n == usable == in_force


@pytest.mark.parametrize("version", ["2.5.1", "2.3.0+cu121", "1.13.1"])
def test_a_torch_older_than_the_floor_is_one_line(version):
    with pytest.raises(BertctlError, match=rf"torch {re.escape(version)} is older than bertctl "
                                           r"needs \(2\.6 or newer\)"):
        hardware.check_torch(version)


@pytest.mark.parametrize("version", ["2.6.0", "2.13.0+cpu", "3.0.0.dev20270101"])
def test_the_floor_and_newer_pass(version):
    hardware.check_torch(version)


def test_the_floor_is_the_one_pyproject_declares():
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert f'"torch>={".".join(map(str, hardware.TORCH_FLOOR))}"' in text
