"""A registry of plug-ins by name (task families, pretraining objectives): each registers itself
when its module is imported, and the stages only ever ask for one by name."""

from __future__ import annotations

from typing import Generic, TypeVar

from bertctl.errors import BertctlError

T = TypeVar("T")


class Registry(dict[str, T], Generic[T]):
    def __init__(self, what: str):
        super().__init__()
        self.what = what   # how an error names the kind: "task family"

    def register(self, item: T) -> T:
        if item.name in self:
            raise ValueError(f"{self.what} {item.name!r} is registered twice")
        self[item.name] = item
        return item

    def known(self, name: str) -> str:
        """`name` if registered, else a ValueError naming the known ones (a settings check:
        pydantic reports it as the setting's error)."""
        if name not in self:
            raise ValueError(f"unknown {self.what} {name!r} (known: {', '.join(self)})")
        return name

    def get_known(self, name: str) -> T:
        """The item of that name; BertctlError (exit 2) naming the known ones otherwise."""
        item = super().get(name)
        if item is None:
            raise BertctlError(f"unknown {self.what} {name!r} (known: {', '.join(self)})")
        return item
