"""The task families by name. A family registers itself when its module is imported
(bertctl/tasks/__init__.py imports the built-in ones); the stages only ever call `get`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bertctl.registry import Registry

if TYPE_CHECKING:
    from bertctl.tasks.base import Family

FAMILIES: Registry["Family"] = Registry("task family")
register = FAMILIES.register
get = FAMILIES.get_known
