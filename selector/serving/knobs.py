"""Serving knobs: how a variant is served, which a sweep may vary without touching its accuracy.

The evaluation key leaves them out (selector.sweep.keys), so settings of one model x precision share
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

KNOBS = {  # dotted config key -> the short name a setting shows
    "measure.load.max_batch_size": "max_batch_size",
    "measure.load.max_queue_delay_ms": "max_queue_delay_ms",
    "engine.vllm.max_num_seqs": "max_num_seqs",
    "engine.vllm.max_num_batched_tokens": "max_num_batched_tokens",
    "engine.vllm.instances": "instances",
}
HF_KNOBS = ("measure.load.max_batch_size", "measure.load.max_queue_delay_ms")
VLLM_KNOBS = ("engine.vllm.max_num_seqs", "engine.vllm.max_num_batched_tokens", "engine.vllm.instances")
BY_SHORT = {short: dotted for dotted, short in KNOBS.items()}


def _get(cfg: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


def swept_knobs(cfgs: Iterable[Any]) -> list[str]:
    """Short names of the knobs whose value differs between a sweep's jobs, in KNOBS order."""
    cfgs = list(cfgs)
    return [short for dotted, short in KNOBS.items() if len({_get(c, dotted) for c in cfgs}) > 1]


def setting_of(cfg: Any, knobs: Iterable[str]) -> dict[str, Any]:
    """The values of these knobs (short names) in a validated config."""
    return {short: _get(cfg, BY_SHORT[short]) for short in KNOBS.values() if short in set(knobs)}


def setting_dir(setting: dict[str, Any]) -> str:
    """'max_batch_size=8,max_queue_delay_ms=10': the job folder below model/precision."""
    return setting_label(setting).replace(", ", ",")


def engine_name(cfg: Any) -> str:
    return "vllm" if cfg.engine.server == "vllm" else cfg.engine.kind


def check_engine_knobs(cfg: Any, given: Iterable[str], swept: Iterable[str]) -> None:
    """A knob set on the command line (or swept) that the variant's engine does not have stops the
    sweep now, naming the knob and what to do instead."""
    engine = engine_name(cfg)
    owned = {"hf": HF_KNOBS, "vllm": VLLM_KNOBS}.get(engine, ())
    given, swept = set(given), set(swept)
    asked = [dotted for dotted, short in KNOBS.items()
             if (dotted in given or short in swept) and dotted not in owned]
    if not asked:
        return
    names = " and ".join(KNOBS[k] for k in asked)
    if engine == "hf":
        raise ConfigError("command line", asked[0], (
            f"{names} {'is a flag' if len(asked) == 1 else 'are flags'} of vLLM's server (engine=vllm); the "
            "in-process engine (engine=hf) batches with measure.load.max_batch_size and max_queue_delay_ms"))
    if engine == "vllm":
        raise ConfigError("command line", asked[0], (
            f"{names} {'belongs' if len(asked) == 1 else 'belong'} to the in-process batcher (engine=hf); vLLM "
            "batches requests itself: sweep engine.vllm.max_num_seqs, max_num_batched_tokens or instances, "
            "or drop this override"))
    where = ("an attached server (engine.base_url), whose batching is set where it was started"
             if not cfg.engine.server_command else "a server the harness starts (engine.server_command), "
             "which batches requests itself")
    raise ConfigError("command line", asked[0], (
        f"engine=openai load-tests {where}; {names} {'belongs' if len(asked) == 1 else 'belong'} to "
        f"{'vLLM started by the harness (engine=vllm)' if asked[0] in VLLM_KNOBS else 'the in-process batcher (engine=hf)'}. "
        "Set the server's own batching in its command (vLLM --max-num-seqs, TGI --max-batch-size), "
        "or drop this override"))
