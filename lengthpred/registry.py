"""Name → factory registries (heads, metrics, sources, policies) with decorator registration."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from lengthpred.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    """A registry of one kind of thing; an unknown name raises an error listing the valid ones."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            self._items[name] = obj
            return obj

        return deco

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            valid = ", ".join(sorted(self._items)) or "(none registered)"
            raise ConfigError(f"unknown {self.kind} {name!r}; valid: {valid}") from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
