"""Worker processes that build work items in parallel and hand the results back in order.

Written instead of using multiprocessing.Pool, for two failures seen with it:
- a Pool worker that dies (the OOM killer, a crash in native code) takes its task with it and
  the parent waits for that result forever;
- Pool.terminate() relies on SIGTERM's default action, but forked workers inherit the CLI's
  SIGTERM handler (unwind like Ctrl-C), and a worker unwinding inside the Pool's shared queue
  lock can leave its sibling blocked on that lock and the parent joining it: a build that
  finished its work hung at 0% CPU.
Here each worker has its own pipe and at most one item at a time, the parent waits on every
busy worker's pipe and process sentinel together, a dead worker is an error naming it, and
workers take SIGTERM's default action and ignore SIGINT (the parent handles Ctrl-C and stops
them).
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.connection import wait
from typing import Any

from bertctl.errors import WorkerDied


def _serve(conn, inherited: list, state: Any, make_state: Callable | None, args: tuple) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # A forked child holds copies of the parent's pipe ends: closed, so that the parent
    # closing (or dying) reads as end of input here.
    for c in inherited:
        c.close()
    if state is None:
        state = make_state(*args)
    while True:
        try:
            item = conn.recv()
        except EOFError:
            return
        try:
            out = (True, state.build(*item))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the parent
            out = (False, exc)
        try:
            conn.send(out)
        except OSError:     # the parent closed its end (it is stopping): nothing to report
            return
        except Exception:   # an exception that does not pickle: its traceback as text
            try:
                conn.send((False, RuntimeError(traceback.format_exc())))
            except OSError:
                return


class OrderedWorkers:
    """`n` processes, each holding `make_state(*args)`; `map(items)` runs `state.build(*item)`
    on them and yields the results in item order, with at most `window` items in flight or
    waiting to be yielded.

    Where fork exists (Linux) the state is built once here and inherited (the workers start
    in milliseconds and share its memory pages); elsewhere each spawned worker builds its own.
    Use as a context manager: leaving it normally lets idle workers exit, leaving it on an
    exception (Ctrl-C included) kills them at once.
    """

    def __init__(self, n: int, make_state: Callable, args: tuple, what: str,
                 window: int | None = None):
        fork = "fork" in mp.get_all_start_methods()
        ctx = mp.get_context("fork" if fork else "spawn")
        self.what, self.window = what, window or 2 * n
        self.procs: list = []
        self.conns: list = []
        state = make_state(*args) if fork else None
        try:
            for _ in range(n):
                mine, theirs = ctx.Pipe()
                inherited = self.conns + [mine] if fork else []
                p = ctx.Process(target=_serve, args=(theirs, inherited, state, make_state, args),
                                daemon=True)
                p.start()
                theirs.close()
                self.procs.append(p)
                self.conns.append(mine)
        except BaseException:
            self.close(kill=True)
            raise

    def __enter__(self) -> OrderedWorkers:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(kill=exc_type is not None)

    def close(self, kill: bool = False) -> None:
        if kill:    # before closing the pipes: a worker must not see them break and complain
            for p in self.procs:
                p.kill()
        for c in self.conns:
            c.close()
        for p in self.procs:
            p.join(timeout=None if kill else 10)
            if p.is_alive():
                p.kill()
                p.join()

    def _died(self, w: int, label: str) -> WorkerDied:
        p = self.procs[w]
        p.join(timeout=5)
        code = p.exitcode
        if code is not None and code < 0:
            name = signal.Signals(-code).name
            how = f"killed by {name}" + (" (out of memory? the kernel's OOM killer sends "
                                         "SIGKILL)" if name == "SIGKILL" else "")
        else:
            how = f"exit code {code}"
        return WorkerDied(f"{self.what}: worker process {p.pid} died ({how}) while building "
                          f"{label}")

    def map(self, items: Iterable[tuple], label: Callable[[tuple], str] = str
            ) -> Iterator[Any]:
        items = iter(items)
        idle = deque(range(len(self.procs)))
        busy: dict[int, tuple[int, str]] = {}   # worker -> (item number, label)
        done: dict[int, Any] = {}
        sent = yielded = 0
        more = True
        while True:
            while more and idle and len(busy) + len(done) < self.window:
                item = next(items, None)
                if item is None:
                    more = False
                    break
                w = idle.popleft()
                busy[w] = (sent, label(item))
                sent += 1
                try:
                    self.conns[w].send(item)
                except OSError:
                    raise self._died(w, busy[w][1]) from None
            if yielded in done:
                yield done.pop(yielded)
                yielded += 1
                continue
            if not busy:
                return
            ready = set(wait([self.conns[w] for w in busy] + [self.procs[w].sentinel
                                                             for w in busy]))
            for w in list(busy):
                if self.conns[w] not in ready and self.procs[w].sentinel not in ready:
                    continue
                number, what = busy.pop(w)
                try:
                    # poll() first: a dead worker's pipe may hold nothing to read.
                    if not self.conns[w].poll():
                        raise EOFError
                    ok, value = self.conns[w].recv()
                except (EOFError, OSError):
                    raise self._died(w, what) from None
                if not ok:
                    raise value
                done[number] = value
                idle.append(w)
