"""The record's assembly from what the variant's running engine says (selector.variant.pipeline runs
the steps, this fills the record): what runs it (quantization, kernel, server, compile time), what
it held in memory, and plan's estimate of that peak beside the measured one."""

from __future__ import annotations

import logging
from typing import Any

from selector.config import SelectorConfig
from selector.engines.spec import Engine, Running
from selector.records import PeakMemory, RunRecord

log = logging.getLogger("selector.variant.recording")


def record_info(record: RunRecord, running: Running, quantized_here: bool) -> None:
    """What runs the variant: its quantization, kernel, server, and what loading noted.
    quantized_here: this run's preparation made the artifact the engine loaded from the cache."""
    info = running.info()
    record.variant.params = record.variant.params or info.params
    record.kernel, record.serving = info.kernel, info.serving
    if info.quant is not None:
        record.quant = quant = info.quant
        quant.notes = list(dict.fromkeys([*quant.notes, *info.notes]))
        if quantized_here:  # the engine loaded it from the cache, where this run's preparation put it
            quant.cached = False
            quant.notes = [n for n in quant.notes if not n.startswith("reused cached artifact")]
        if quant.quantize_s and not quant.cached:  # a stage of this run; a cached artifact's took place before
            record.timings_s["quantize"] = quant.quantize_s
    if record.perf is not None and info.compiled is not None:
        record.perf.compiled, record.perf.compile_s = info.compiled, info.compile_s
        record.perf.compile_note = info.compile_note


def record_running(record: RunRecord, running: Running, engine: Engine[Any], cfg: SelectorConfig, device: str, tasks: list[Any],
                   prepare_peak: PeakMemory | None, quantized_here: bool) -> None:
    """What the running engine held and what ran it, at the end (a server that died: until then)."""
    try:
        record_info(record, running, quantized_here)  # again: a server's requests served, the fast path's compile time
        memory = running.memory()
    except Exception as e:  # never a reason to lose what was measured before
        log.warning("no memory figures for %s: %s: %s", record.name, type(e).__name__, e)
        return
    memory.prepare = prepare_peak
    runtime = memory.runtime_rss_bytes if engine.in_process else engine.planned_runtime_bytes(device)
    memory.planned_serving_bytes = planned_serving(cfg, running, engine, device, tasks, runtime)
    record.memory = memory


def planned_serving(cfg: SelectorConfig, running: Running, engine: Engine[Any], device: str, tasks: list[Any],
                    runtime_bytes: int | None) -> int | None:
    """plan's estimate of the serving peak, at the shapes this variant ran, beside the measured one."""
    from selector.plan.estimate import serving_bytes, serving_shape

    if running.tokenizer is None:
        return None
    try:
        batch, context = serving_shape(cfg, tasks, running.encode)
        return serving_bytes(cfg, device, batch=batch, context=context, runtime_bytes=runtime_bytes,
                             copies=engine.copies())
    except Exception as e:  # an estimate beside the figure: never a reason to lose the figure
        log.warning("no plan estimate of the serving peak: %s: %s", type(e).__name__, e)
        return None
