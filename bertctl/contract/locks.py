"""One writer per output: an exclusive lock beside each artifact directory for a whole run.

    with output_lock(out, wait=False):   # BertctlError naming the holder if another run has it
        ...

The lock is an OS lock (`flock`) on a hidden file next to the output, `.NAME.lock`, so it is
released by the kernel when its process dies, however it dies: a lock left by a killed run is
simply taken by the next one. A run removes the file when it finishes (a killed one cannot: its
empty file stays until the next run on that output). The holder writes who it is (pid, host,
start time) into `.NAME.lock.info`, which a second run names in its error. flock works across
processes of one machine and on NFS v4 and most cluster file systems (Lustre, GPFS) when they
are mounted with lock support; on a file system without it (some NFS v3 setups) two machines
may both get the lock: run one writer per output there.

The lock is not reentrant: a caller that holds it for a whole run (a training stage, whose run
directory it covers) tells `artifacts.produce` so (`locked=True`) rather than locking twice.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from bertctl import console
from bertctl.contract import signals
from bertctl.errors import BertctlError


def lock_path(out: Path) -> Path:
    return out.parent / f".{out.name}.lock"


def info_path(out: Path) -> Path:
    path = lock_path(out)
    return path.with_name(path.name + ".info")


@contextlib.contextmanager
def output_lock(out: Path, wait: bool = False) -> Iterator[None]:
    """Hold `out`'s lock for the block; BertctlError naming the holder if another run has it,
    or (`wait`, the stages' --wait) wait until it is released."""
    out = Path(out).absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    path, info = lock_path(out), info_path(out)
    fd = _acquire(path, out, info, wait)
    try:
        info.write_text(json.dumps({
            "pid": os.getpid(), "host": socket.gethostname(),
            "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}))
        yield
    finally:
        with signals.deferred():   # a SIGTERM now would leave the lock file behind
            with contextlib.suppress(OSError):
                info.unlink()
                # Removed while still locked; see _acquire for the waiters.
                path.unlink()
            os.close(fd)   # releases the lock


def _acquire(path: Path, out: Path, info: Path, wait: bool) -> int:
    """The open, locked descriptor of the lock file now at `path`. A holder removes the file
    before it releases, so a waiter may wake up holding a removed file, and must then lock the
    new one."""
    told = False
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not wait:
                    raise BertctlError(f"{out}: another bertctl run is writing it "
                                       f"({holder(info)}); wait for it to finish, or pass "
                                       "--wait") from None
                if not told:
                    console.log(f"{out}: waiting for another bertctl run ({holder(info)})")
                    told = True
                fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                return fd
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def holder(info: Path) -> str:
    try:
        d = json.loads(info.read_text())
        return f"pid {d['pid']} on {d['host']}, started {d['started']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "holder unknown"
