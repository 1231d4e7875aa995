"""A termination request (SIGTERM, as a kill or a CI timeout sends it) unwinds a run like Ctrl-C,
raised as KeyboardInterrupt, but never where raising would lose it or leave a half state:

- inside a `deferred()` block: writing a checkpoint (C++ and Rust writers calling back into
  Python end in SIGABRT when an exception crosses them), publishing an artifact, releasing a
  lock: the block finishes;
- inside a finalizer (`__del__`, run by the garbage collector at any point), where Python
  prints "Exception ignored" and drops the exception, so the run went on.

Such a request is kept, and raised at the next safe point, `raise_pending()` (the training loop
calls it every step), or else by the CLI once the stage returns: exit 130, the finished artifact
named, never exit 0.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

_depth = 0
_pending = False


def _in_finalizer(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def terminate(signum, frame) -> None:
    """The SIGTERM handler (installed by the CLI)."""
    global _pending
    if _depth or _in_finalizer(frame):
        _pending = True
        return
    raise KeyboardInterrupt


def install() -> None:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, terminate)


def pending() -> bool:
    return _pending


def raise_pending() -> None:
    """A safe point: raise the termination requested while it could not be raised."""
    global _pending
    if _pending and not _depth:
        _pending = False
        raise KeyboardInterrupt


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A block a termination request does not cut short (it stays pending)."""
    global _depth
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
