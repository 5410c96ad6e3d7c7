"""engine=hf, inside the variant's worker: the loaded model evaluated and measured in this process
(selector.sweep.pipeline.VariantRun runs the stages; this is the in-process branch of it)."""

from __future__ import annotations

import logging
from typing import Any

from selector.records import PerfResult
from selector.sweep import evaluation

log = logging.getLogger("selector.sweep.inprocess_run")


def run_inprocess(run: Any, resolved: Any, loaded: Any, tasks: Any, device: str) -> None:
    """run: the variant's VariantRun (its record, stages and evaluation)."""
    from selector.engines.hf import HFEngine
    from selector.measure.latency import measure_latency, measure_throughput

    cfg = run.cfg
    engine = HFEngine(loaded.model, loaded.tokenizer, cfg.engine.batch_size, cfg.engine.max_batch_tokens,
                      compile=cfg.engine.compile)
    with run.timed("evaluate"):
        run.evaluate(engine, tasks)
    if run.decision is not None:  # stopped early: what it weighs, and nothing else to measure
        if cfg.measure.fidelity and cfg.precision.name == cfg.baseline_precision:
            with run.timed("fidelity"):  # but a baseline still leaves its siblings their reference
                run.fidelity_pass(loaded, tasks)
        run.record_memory(resolved, loaded, device)
        return
    if run.is_reference and cfg.measure.noise_floor.repeats > 0:
        with run.timed("noise_floor"):
            spread = evaluation.noise_floor(loaded, tasks, cfg, {n: r.value for n, r in run.record.tasks.items()})
            run.record.config["noise_floor"] = spread
            log.info("noise floor of %s over %d re-evaluations: %s", run.variant.name,
                     cfg.measure.noise_floor.repeats, spread)
    if cfg.measure.fidelity:
        with run.timed("fidelity"):
            run.fidelity_pass(loaded, tasks)
    with run.timed("measure"):
        perf = PerfResult(device=device)
        if cfg.measure.latency.enabled:
            perf.latency = measure_latency(loaded.model, loaded.tokenizer, cfg.measure.latency, fast=engine.fast)
        if cfg.measure.throughput.enabled:
            perf.throughput = measure_throughput(loaded.model, loaded.tokenizer, cfg.measure.throughput,
                                                 fast=engine.fast, latency=perf.latency)
        perf.compiled, perf.compile_s, perf.compile_note = engine.fast.active, engine.fast.compile_s, engine.fast.note
        if cfg.measure.load.enabled:
            from selector.measure.traffic import run_inprocess_load

            perf.load = run_inprocess_load(loaded.model, loaded.tokenizer, tasks, cfg)
        if cfg.measure.load.capacity:  # on the same loaded model, after the ladder
            from selector.measure.traffic import run_inprocess_capacity

            found = run_inprocess_capacity(loaded.model, loaded.tokenizer, tasks, cfg)
            perf.capacity, perf.capacity_concurrency = found.get("rate"), found.get("concurrency")
        run.record.perf = perf
        run.record_memory(resolved, loaded, device)
