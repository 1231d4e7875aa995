"""Run bertctl with a signal sent to itself at an exact point of its work (the fault matrix's
injector: timing-based kills would hit a different point on every machine).

    python killpoint.py MODULE:FUNCTION N before|after KILL|TERM -- bertctl ARGS...

The N-th call of FUNCTION (a module function or Class.method) signals the process just before
or just after the original runs. Nothing in bertctl knows about it: the function is wrapped
here, then bertctl's own `main()` runs.
"""

import functools
import importlib
import os
import signal
import sys


def arm(target: str, n: int, when: str, sig: signal.Signals) -> None:
    module_name, _, qualname = target.partition(":")
    owner = importlib.import_module(module_name)
    *parents, name = qualname.split(".")
    for part in parents:
        owner = getattr(owner, part)
    original = getattr(owner, name)
    calls = 0

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        nonlocal calls
        calls += 1
        if calls == n and when == "before":
            os.kill(os.getpid(), sig)
        result = original(*args, **kwargs)
        if calls == n and when == "after":
            os.kill(os.getpid(), sig)
        return result

    setattr(owner, name, wrapper)


if __name__ == "__main__":
    target, n, when, sig, sep, *args = sys.argv[1:]
    assert sep == "--" and when in ("before", "after")
    from bertctl.cli import main

    arm(target, int(n), when, {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM}[sig])
    sys.argv = ["bertctl", *args]
    main()
