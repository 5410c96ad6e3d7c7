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

from selector.engines.spec import Engine
from selector.registry import Registry

if TYPE_CHECKING:
    from selector.config import EngineConfig

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


def check_deploy_engine(value: str | None, engines: list[Any]) -> str | None:
    """Why policy.deploy_engine=value is refused, or None. It takes one spelling per engine: the name
    the engine's deploy_name() gives (hf: transformers in-process; vllm; for engine=command the
    program its command starts, e.g. transformers for `transformers serve`), or the lowercase name
    of a server the sweep does not run (tgi, sglang): then the report warns that latency came from
    another engine. `engines`: the sweep's own (Engine instances)."""
    if not value:
        return None
    own = sorted({name for e in engines if (name := e.deploy_name()) is not None})
    # A kind whose deploy name is its kind (deploy_name not overridden): hf, vllm, scripted.
    fixed = sorted(name for name in ENGINES.names() if engine_class(name).deploy_name is Engine.deploy_name)
    known = sorted({*own, *fixed})
    if value in known:
        return None
    said = value.strip().lower()
    meant = [name for name in known if name == said]
    meant += [name for name in fixed if said in engine_class(name).deploy_spellings and name not in meant]
    if said in ENGINES.names() and not meant:
        return (f"{value!r} is an engine kind, not the engine you deploy on: name the program it serves with "
                f"(for engine=command its command's program, e.g. transformers for `transformers serve`; tgi, "
                f"sglang), or one of {', '.join(known)}")
    meant = meant or difflib.get_close_matches(said, known, n=2, cutoff=0.75)
    if meant:
        runs = f" (this sweep's engine{'s' if len(own) > 1 else ''}: {', '.join(own)})" if own else ""
        return (f"unknown spelling {value!r}. Did you mean {' or '.join(map(repr, meant))}? It takes one name per "
                f"engine: hf (transformers in-process), vllm, or the program a started server runs{runs}")
    if value != said or not value.replace("-", "").replace("_", "").replace(".", "").isalnum():
        return f"{value!r}: an engine's name is one lowercase word, e.g. {', '.join(known)}"
    return None


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
