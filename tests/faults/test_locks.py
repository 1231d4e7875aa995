"""One writer per output (#13): a second run on the same --out fails at once naming the holder,
or waits with --wait; a lock left by a killed process is taken over."""

import os
import signal
import subprocess
import sys
import threading
import time

from bertctl import locks

from conftest import run_bertctl


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
    out = tmp_path / "tok"
    held, release = threading.Event(), threading.Event()

    def hold():
        with locks.output_lock(out):
            held.set()
            release.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(10)
    threading.Timer(2.0, release.set).start()
    r = _tokenize(minilm_dir, out, "--wait")
    t.join()
    assert r.returncode == 0, r.stderr
    assert "waiting for another bertctl run" in r.stderr
    assert (out / "artifact.json").exists()


def test_the_lock_of_a_killed_run_is_taken_over(tmp_path, minilm_dir):
    out = tmp_path / "tok"
    code = ("import sys, time; from pathlib import Path; from bertctl import locks\n"
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
