"""Typed `precision.params`: each backend declares a small dataclass, and a config's params are
checked against it before anything loads, without importing the backend's library.

A param the backend does not know, or a value of the wrong type, is a ConfigError naming
`conf/precision/<name>.yaml`, the line and the field, so a typo stops the sweep in its preflight
instead of failing (or being silently ignored) deep inside a quantization library an hour later.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from typing import Any, Literal

from selector.config import PrecisionConfig
from selector.errors import ConfigError
from selector.origin import Origin


@dataclasses.dataclass(frozen=True)
class NoParams:
    """A backend that takes no params."""


def parse_params(cls: type, precision: PrecisionConfig, backend: str, origin: Origin = Origin()) -> Any:
    """`precision.params` as an instance of the dataclass `cls`, or a ConfigError saying what is wrong."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    raw = dict(precision.params or {})
    for key, value in raw.items():
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            known = ", ".join(fields) or "none"
            raise param_error(precision, key, f"backend {backend} has no param '{key}'.{hint} Known params: {known}.",
                              origin)
        wanted = hints[key]
        if not accepts(wanted, value):
            raise param_error(precision, key, f"must be {describe(wanted)}, got {value!r}", origin)
    return cls(**{k: _plain(v) for k, v in raw.items()})


def set_fields(params: Any) -> dict[str, Any]:
    """The params that were given (not None), to pass on to a library: unset ones keep its defaults."""
    return {f.name: getattr(params, f.name) for f in dataclasses.fields(params)
            if getattr(params, f.name) is not None}


def accepts(hint: Any, value: Any) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin is Literal:
        return value in args
    if origin in (typing.Union, types.UnionType):
        return any(accepts(a, value) for a in args)
    if hint is type(None):
        return value is None
    if origin in (list, tuple):
        return isinstance(value, (list, tuple)) and (not args or all(accepts(args[0], v) for v in value))
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, hint) if isinstance(hint, type) else False


def describe(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        parts = [describe(a) for a in args if a is not type(None)]
        return " or ".join(parts) + (" (or null)" if type(None) in args else "")
    if origin in (list, tuple):
        return f"a list ({describe(args[0])} each)" if args else "a list"
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    return names.get(hint, getattr(hint, "__name__", str(hint)))


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def param_error(precision: PrecisionConfig, key: str, problem: str, origin: Origin = Origin()) -> ConfigError:
    """A ConfigError at `params.<key>` of the precision's config file (with its line), or the command line."""
    return origin.error(f"precision.params.{key}" if key else "precision.params", problem, stem=precision.name)