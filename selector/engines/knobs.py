"""Serving knobs: how a variant is served, which a sweep may vary without touching its accuracy.

The evaluation key leaves them out (selector.variant.keys), so settings of one model x precision share
every scored item; the variant key keeps them, so each setting is its own variant with its own
record. A sweep that varies a knob labels each variant with its setting
("smollm2-135m/bf16 [max_batch_size=8]") and gives it its own job folder
(`smollm2-135m/bf16/max_batch_size=8`); a sweep that varies none keeps the plain names.

Each knob belongs to one engine: the in-process batcher's to engine=hf, vLLM's scheduler limits to
engine=vllm (the harness passes them as flags to the server it starts). A knob asked of an engine
that does not have it stops the sweep before anything loads.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from selector.errors import ConfigError
from selector.records import setting_label


def all_knobs() -> dict[str, str]:
    """Every engine kind's knobs: dotted config key -> the short name a setting shows."""
    from selector.engines import ENGINES, engine_class

    return {k.key: k.short for name in ENGINES.names() for k in engine_class(name).knobs}


def served_by(config: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The engine (selector.engines.spec.Engine) of a RunRecord's resolved config and its knobs'
    values (Knob.short -> value), for the load diagnosis's advice (diagnosis.Serving). An engine kind
    this selector does not know: None, a server whose knobs are not known here."""
    from omegaconf import OmegaConf

    from selector.engines import engine_class, upgrade
    from selector.registry import UnknownNameError

    engine = upgrade(dict(config.get("engine") or {}))
    try:
        cls = engine_class(str(engine.get("kind", "hf")))
    except UnknownNameError:
        return None, {}
    whole = OmegaConf.create({**config, "engine": engine})
    return cls(engine), {k.short: OmegaConf.select(whole, k.key) for k in cls.knobs}


def _get(cfg: Any, dotted: str) -> Any:
    """The value at a dotted key, None where this config (its engine kind) has no such key."""
    for part in dotted.split("."):
        cfg = getattr(cfg, part, None)
    return cfg


def swept_knobs(cfgs: Iterable[Any]) -> list[str]:
    """Short names of the knobs whose value differs between a sweep's jobs, in registry order."""
    cfgs = list(cfgs)
    return [short for dotted, short in all_knobs().items() if len({repr(_get(c, dotted)) for c in cfgs}) > 1]


def setting_of(cfg: Any, knobs: Iterable[str]) -> dict[str, Any]:
    """The values of these knobs (short names) in a validated config."""
    wanted = set(knobs)
    return {short: _get(cfg, dotted) for dotted, short in all_knobs().items() if short in wanted}


def setting_dir(setting: dict[str, Any]) -> str:
    """'max_batch_size=8,max_queue_delay_ms=10': the job folder below model/precision."""
    return setting_label(setting).replace(", ", ",")


def check_engine_knobs(cfg: Any, given: Iterable[str], swept: Iterable[str]) -> None:
    """A knob set on the command line (or swept) that the variant's engine does not have stops the
    sweep now, naming the knob, the engine kind that has it, and this engine's own."""
    from selector.engines import engine_for

    engine = engine_for(cfg.engine)
    owned = {k.key for k in engine.knobs}
    given, swept = set(given), set(swept)
    knobs = all_knobs()
    asked = [dotted for dotted, short in knobs.items() if (dotted in given or short in swept) and dotted not in owned]
    if not asked:
        return
    names = " and ".join(knobs[k] for k in asked)
    verb = "is a knob" if len(asked) == 1 else "are knobs"
    own = ", ".join(k.key for k in engine.knobs)
    theirs = (f"engine={engine.kind} batches with {own}" if own else
              f"engine={engine.kind} ({engine.what or engine.display_name()}) batches requests as its server was started: "
              "set its own batching in its command (vLLM --max-num-seqs, TGI --max-batch-size)")
    raise ConfigError("command line", asked[0], f"{names} {verb} of {_owner(asked[0])}, not of engine={engine.kind}; "
                                                f"{theirs}, or drop this override")


def _owner(dotted: str) -> str:
    from selector.engines import ENGINES, engine_class

    return " and ".join(f"engine={name}" for name in ENGINES.names()
                        if any(k.key == dotted for k in engine_class(name).knobs))
