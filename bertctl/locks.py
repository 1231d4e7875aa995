"""One writer per output: an exclusive lock beside each artifact directory for a whole run.

The lock is `filelock`'s OS lock (flock on Unix) on a hidden file next to the output,
`.NAME.lock`, so it is released by the kernel when its process dies, however it dies: a lock
left by a killed run is simply taken by the next one. A run removes the file when it finishes
(a killed one cannot: its empty file stays until the next run on that output). The holder
writes who it is (pid, host, start time) into `.NAME.lock.info`, which a second run names in
its error. flock works across
processes of one machine and on NFS v4 and most cluster file systems (Lustre, GPFS) when they
are mounted with lock support; on a file system without it (some NFS v3 setups) two machines
may both get the lock: run one writer per output there.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from bertctl import signals
from bertctl.errors import BertctlError

_held: set[Path] = set()       # outputs this process holds (a stage nests produce in a run)
_wait = False


def wait_for_locks(wait: bool) -> None:
    """--wait: block until another run's lock is released instead of failing at once."""
    global _wait
    _wait = wait


def lock_path(out: Path) -> Path:
    return out.parent / f".{out.name}.lock"


@contextlib.contextmanager
def output_lock(out: Path) -> Iterator[None]:
    """Hold `out`'s lock for the block; BertctlError naming the holder if another run has it
    (or wait for it, after `wait_for_locks(True)`)."""
    from filelock import FileLock, Timeout

    out = Path(out).absolute()
    if out in _held:
        yield
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    path = lock_path(out)
    info = path.with_name(path.name + ".info")
    lock = FileLock(str(path))
    try:
        removable = _acquire(lock, path, timeout=0)
    except Timeout:
        if not _wait:
            raise BertctlError(f"{out}: another bertctl run is writing it ({holder(info)}); "
                               "wait for it to finish, or pass --wait") from None
        from bertctl import console

        console.log(f"{out}: waiting for another bertctl run ({holder(info)})")
        removable = _acquire(lock, path, timeout=-1)
    try:
        info.write_text(json.dumps({
            "pid": os.getpid(), "host": socket.gethostname(),
            "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}))
        _held.add(out)
        yield
    finally:
        with signals.deferred():   # a SIGTERM now would leave the lock file behind
            _held.discard(out)
            with contextlib.suppress(OSError):
                info.unlink()
                if removable:     # removed while still locked; see _acquire for the waiters
                    path.unlink()
            lock.release()


def _acquire(lock, path: Path, timeout: float) -> bool:
    """Acquire, making sure the lock held is on the file now at `path`: a holder removes the
    file before it releases, so a waiter may wake up locking a removed file, and must then lock
    the new one. True when that could be checked (the file may then be removed on release)."""
    while True:
        lock.acquire(timeout=timeout)
        fd = getattr(getattr(lock, "_context", None), "lock_file_fd", None)
        if fd is None:       # filelock's internals changed: keep the file, never remove it
            return False
        try:
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                return True
        except FileNotFoundError:
            pass
        lock.release()


def holder(info: Path) -> str:
    try:
        d = json.loads(info.read_text())
        return f"pid {d['pid']} on {d['host']}, started {d['started']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "holder unknown"
