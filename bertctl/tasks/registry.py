"""The task families by name. A family registers itself when its module is imported
(bertctl/tasks/__init__.py imports the built-in ones); the stages only ever call `get`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bertctl.errors import BertctlError

if TYPE_CHECKING:
    from bertctl.tasks.base import Family

FAMILIES: dict[str, "Family"] = {}


def register(family: "Family") -> "Family":
    if family.name in FAMILIES:
        raise ValueError(f"task family {family.name!r} is registered twice")
    FAMILIES[family.name] = family
    return family


def get(name: str) -> "Family":
    family = FAMILIES.get(name)
    if family is None:
        raise BertctlError(f"unknown task family {name!r} (known: {', '.join(FAMILIES)})")
    return family
