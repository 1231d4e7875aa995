"""The runtime a stage runs in, applied once as it starts: its CPU threads set and `auto`
precision resolved to what this machine runs (what the manifest records and the artifact id
hashes). Every stage that computes calls `applied` first."""

from __future__ import annotations

from typing import TypeVar

from bertctl import hardware
from bertctl.settings import Runtime, Threads

S = TypeVar("S", bound=Threads)


def applied(settings: S) -> S:
    hardware.set_threads(settings.threads)
    return settings.resolved() if isinstance(settings, Runtime) else settings
