"""Engines, by the `kind` an engine config gives (conf/engine/*.yaml), as precision backends are
registered by their `backend`: one class per kind (selector/engines/spec.py), imported only when
its kind is used. Nothing outside this registry asks which kind is running.

    hf        transformers in the variant's own process (engines/inprocess/engine.py)
    vllm      vLLM's OpenAI-compatible server, started per variant (engines/vllm/engine.py)
    command   any server started per variant from a command template (engines/served/command.py)
    openai    a server that is already running, attached by URL (engines/served/attached.py)
    scripted  answers from the eval set's own targets at set accuracies, without a model: for
              tests of the search, the policy flow and the faults (engines/scripted.py)
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import TYPE_CHECKING, Any

from selector.registry import Registry

if TYPE_CHECKING:
    from selector.config import EngineConfig
    from selector.engines.spec import Engine

ENGINES: Registry = Registry("engine kind")
ENGINES.register("hf", "selector.engines.inprocess.engine:InProcessEngine")
ENGINES.register("vllm", "selector.engines.vllm.engine:VllmEngine")
ENGINES.register("command", "selector.engines.served.command:CommandEngine")
ENGINES.register("openai", "selector.engines.served.attached:AttachedEngine")
ENGINES.register("scripted", "selector.engines.scripted:ScriptedEngine")


def engine_class(kind: str) -> type[Engine[Any]]:
    """The engine class of a kind (UnknownNameError, with a did-you-mean, for an unknown one)."""
    cls: type[Engine[Any]] = ENGINES.get(kind)
    return cls


def engine_for(config: EngineConfig) -> Engine[Any]:
    """The engine of a validated engine config (its kind's own dataclass)."""
    return engine_class(config.kind)(config)


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """An engine config as selector wrote it before engines had kinds of their own (one flat
    config: kind openai with `server: vllm`, a `server_command`, or a `base_url`) in today's form,
    so stored sweeps and records still read. Today's configs pass through unchanged."""
    if "server" not in data:  # the flat config had it on every engine (null but for vLLM)
        return data
    data = dict(data)
    server = data.pop("server", None)
    if data.get("kind") == "openai":
        data["kind"] = "vllm" if server == "vllm" else "command" if data.get("server_command") else "openai"
    fields = {f.name for f in dataclasses.fields(engine_class(data.get("kind", "hf")).Config)}
    return {k: v for k, v in data.items() if k in fields}


def unknown_key(kind: str, data: dict[str, Any]) -> tuple[str, str] | None:
    """The first setting (dotted, below `engine.`) this kind's config does not have, and why it is
    refused: which kind has it, or the closest of its own (a did-you-mean)."""
    return _unknown(engine_class(kind).Config, data, "", kind)


def _unknown(cls: type, data: dict[str, Any], prefix: str, kind: str) -> tuple[str, str] | None:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key, value in data.items():
        f = fields.get(key)
        if f is None:
            return prefix + key, _why(kind, cls, prefix + key)
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        if dataclasses.is_dataclass(default) and isinstance(value, dict):
            found = _unknown(type(default), value, f"{prefix}{key}.", kind)
            if found:
                return found
    return None


def _why(kind: str, cls: type, dotted: str) -> str:
    head, _, last = dotted.rpartition(".")
    own = [f.name for f in dataclasses.fields(cls)]
    close = difflib.get_close_matches(last, own, n=2)
    elsewhere = [(name, k.key) for name in ENGINES.names() if name != kind
                 for k in engine_class(name).knobs if k.key.rsplit(".", 1)[-1] == last]
    owners = [name for name in ENGINES.names() if name != kind and not head
              and last in {f.name for f in dataclasses.fields(engine_class(name).Config)}]
    hint = f" Did you mean {' or '.join('engine.' + (head + '.' if head else '') + c for c in close)}?" if close else ""
    if elsewhere:
        hint += " " + "; ".join(f"{key} is a setting of engine={name}" for name, key in elsewhere) + "."
    elif owners:
        hint += f" It is a setting of engine kind {' and '.join(owners)}."
    where = f"engine.{head}" if head else f"engine kind {kind}"
    return f"{where} has no setting {last!r}.{hint} Its settings: {', '.join(own)}"
