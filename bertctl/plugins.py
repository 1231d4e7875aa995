"""Plug-ins from installed packages: a distribution declares an entry point in the group
`bertctl.plugins` naming a module (or a function to call), and `bertctl` imports it when the
command tree is made, before the flags that list the registered families, objectives,
architectures and optimizers are built. The module registers its plug-ins as bertctl's own
modules do (`registry.register(...)`), importing torch only in the methods that run a model, so
`bertctl --help` stays light.

A plug-in that fails to import is skipped with one line on stderr naming it and its
distribution: one broken package must not take every command down with it (a command that
needs it then names the plug-in kind as unknown, the line above saying why).
"""

from __future__ import annotations

import contextlib
import sys
from importlib import metadata

GROUP = "bertctl.plugins"
_loaded: dict[str, str] | None = None


def load() -> dict[str, str]:
    """Import every installed plug-in once; {entry point name: its distribution and version}
    (what an artifact's environment records)."""
    global _loaded
    if _loaded is not None:
        return _loaded
    _loaded = {}
    for ep in sorted(metadata.entry_points(group=GROUP), key=lambda e: e.name):
        where = (f"{ep.dist.name} {ep.dist.version}" if ep.dist is not None
                 else "an unknown distribution")
        try:
            # What it prints goes to stderr: stdout is the command's (--json) alone.
            with contextlib.redirect_stdout(sys.stderr):
                found = ep.load()
                if callable(found):
                    found()
        except KeyboardInterrupt:
            raise
        except BaseException as e:   # noqa: BLE001 (a SystemExit too: it is skipped)
            said = " ".join(str(e).split())
            print(f"bertctl: plug-in {ep.name} ({where}: {ep.value}) not loaded: "
                  f"{type(e).__name__}" + (f": {said}" if said else ""), file=sys.stderr)
            continue
        _loaded[ep.name] = where
    return _loaded


__all__ = ["GROUP", "load"]
