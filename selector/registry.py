"""One small generic registry: a name maps to a lazily imported "module:attr" target.

Heavy libraries (bitsandbytes, gptqmodel, llmcompressor...) are imported only when their entry is
used, so listing or validating configs never needs them installed.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError):
    """A name that is not registered; the message suggests the closest ones."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0])


class Registry(Generic[T]):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._targets: dict[str, str] = {}

    def register(self, name: str, target: str) -> None:
        if name in self._targets:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._targets[name] = target

    def names(self) -> list[str]:
        return sorted(self._targets)

    def __contains__(self, name: str) -> bool:
        return name in self._targets

    def target(self, name: str) -> str:
        if name not in self._targets:
            close = difflib.get_close_matches(name, self._targets, n=3)
            hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}.{hint} Known: {', '.join(self.names())}."
            )
        return self._targets[name]

    def get(self, name: str) -> Any:
        module, _, attr = self.target(name).partition(":")
        return getattr(importlib.import_module(module), attr)
