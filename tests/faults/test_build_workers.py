"""The pretraining-data builder's worker processes under faults: a worker that dies is an error
naming it (never a wait for a result that cannot come), an exception in a worker reaches the
parent, and a stopped build leaves no worker process behind."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bertctl.data.pretraining import build as pretraining
from bertctl.data.corpus import iter_documents
from bertctl.data.workers import OrderedWorkers
from bertctl.errors import BertctlError
from helpers import CORPUS

KILLPOINT = Path(__file__).with_name("killpoint.py")
ROOT = Path(__file__).resolve().parents[2]


def _session_processes(sid: int) -> list[int]:
    """Live processes of session `sid` (Linux /proc), zombies excluded."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def _build(tokenizer, out, point, sig, timeout=120):
    """`bertctl build-pretrain-data --workers 2` in its own session with a kill point armed;
    returns the finished process and the session's processes still alive shortly after."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                                       os.environ.get("PYTHONPATH")]))}
    target, n, when = point
    cmd = [sys.executable, str(KILLPOINT), target, str(n), when, sig, "--",
           "build-pretrain-data", str(tokenizer), str(CORPUS / "alice.txt"), "--out", str(out),
           "--max-seq-length", "64", "--dupe-factor", "2", "--chunk-chars", "4000",
           "--workers", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError("the build hung") from None
    deadline = time.monotonic() + 5
    while (left := _session_processes(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return proc.returncode, err, left


def test_a_killed_worker_is_an_error_naming_it_not_a_hang(tmp_path, small_tokenizer):
    # Every worker SIGKILLs itself on its first chunk (the wrapper is inherited through fork).
    code, err, left = _build(small_tokenizer, tmp_path / "out",
                             ("bertctl.data.pretraining.build:_ChunkBuilder.build", 1, "before"), "KILL")
    assert code == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "worker process" in lines[0] and "killed by SIGKILL" in lines[0]
    assert "while building chunk " in lines[0]
    assert not (tmp_path / "out").exists()
    assert left == []


def test_sigterm_stops_the_workers_with_the_build(tmp_path, small_tokenizer):
    # The parent is stopped after it wrote its first chunk's instances, workers busy.
    code, err, left = _build(small_tokenizer, tmp_path / "out",
                             ("bertctl.data.pretraining.shards:ShardWriter.append", 1, "after"),
                             "TERM")
    assert code == 130, err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()
    assert left == []


def test_an_error_in_a_worker_reaches_the_parent_and_nothing_is_left(tmp_path, small_tokenizer,
                                                                      monkeypatch):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(Path(small_tokenizer) / "tokenizer.json"))
    real = pretraining._ChunkBuilder.build

    def build(self, index, first, docs):
        if index == 3:
            raise BertctlError(f"chunk {index}: refused")
        return real(self, index, first, docs)

    monkeypatch.setattr(pretraining._ChunkBuilder, "build", build)
    config = pretraining.PretrainingDataSettings(max_seq_length=64, dupe_factor=1,
                                                 chunk_chars=4000)
    with pytest.raises(BertctlError, match="chunk 3: refused"):
        pretraining.build_pretraining_data(iter_documents([CORPUS / "alice.txt"]), tok,
                                           tmp_path / "out", config, workers=2)
    assert not any(p.name.startswith(("train", "validation")) for p in
                   (tmp_path / "out").iterdir())


class _Sleeper:
    def build(self, i, seconds):
        time.sleep(seconds)
        return i, os.getpid()


def test_results_come_back_in_order_whatever_finishes_first():
    # Early items sleep longest: a worker finishing later items first must not reorder them.
    items = [(i, 0.2 if i % 3 == 0 else 0.0) for i in range(12)]
    with OrderedWorkers(2, _Sleeper, (), "test", window=3) as pool:
        out = list(pool.map(items))
    assert [i for i, _ in out] == list(range(12))
    assert len({pid for _, pid in out}) == 2
