"""One writer per output (#13): a second run on the same --out fails at once naming the holder,
or waits with --wait; a lock left by a killed process is taken over."""

import os
import signal
import subprocess
import sys
import threading
import time

from bertctl.contract import locks

from helpers import run_bertctl


def _tokenize(minilm_dir, out, *extra):
    return run_bertctl("tokenize", "--from-vocab", minilm_dir / "vocab.txt", "--out", out,
                       *extra, timeout=120)


def test_a_second_run_fails_at_once_naming_the_holder(tmp_path, minilm_dir):
    out = tmp_path / "tok"
    with locks.output_lock(out):
        started = time.monotonic()
        r = _tokenize(minilm_dir, out)
        assert time.monotonic() - started < 60
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"pid {os.getpid()}" in r.stderr and "--wait" in r.stderr
    assert not out.exists()
    assert not locks.lock_path(out).with_name(locks.lock_path(out).name + ".info").exists()
    r = _tokenize(minilm_dir, out)          # released: the next run writes
    assert r.returncode == 0, r.stderr
    assert (out / "artifact.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok"]   # its lock files removed


def test_wait_takes_the_lock_when_it_is_released(tmp_path, minilm_dir):
    """The lock is released only once the waiting run says it waits (not after a fixed delay,
    which a loaded machine's slow start outlasts)."""
    out = tmp_path / "tok"
    with locks.output_lock(out):
        waiter = subprocess.Popen(
            [sys.executable, "-m", "bertctl", "tokenize", "--from-vocab",
             str(minilm_dir / "vocab.txt"), "--out", str(out), "--wait"],
            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        said: list[str] = []

        def read() -> None:
            for line in waiter.stderr:
                said.append(line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        deadline = time.monotonic() + 120

        def waits() -> bool:
            return any("waiting for another bertctl run" in x for x in said)

        while not waits() and waiter.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert waits() and waiter.poll() is None, "".join(said)
    assert waiter.wait(120) == 0, "".join(said)
    reader.join(10)
    assert (out / "artifact.json").exists()


def test_the_lock_of_a_killed_run_is_taken_over(tmp_path, minilm_dir):
    out = tmp_path / "tok"
    code = ("import sys, time; from pathlib import Path; from bertctl.contract import locks\n"
            f"cm = locks.output_lock(Path({str(out)!r})); cm.__enter__()\n"
            "print('held', flush=True); time.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    r = _tokenize(minilm_dir, out)
    assert r.returncode == 2 and f"pid {holder.pid}" in r.stderr
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    r = _tokenize(minilm_dir, out)          # the kernel released its lock with the process
    assert r.returncode == 0, r.stderr
