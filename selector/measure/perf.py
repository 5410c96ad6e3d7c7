"""A variant's performance, measured through its running engine: latency at concurrency 1,
throughput at fixed batch sizes, and (measure.load) the load ladder and the capacity search, in
that order, on the same warm engine. Every engine gets every figure the same way (engines/spec.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from selector.config import SelectorConfig
from selector.records import PerfResult

if TYPE_CHECKING:
    from selector.engines.spec import Running


def measure_perf(running: Running, tasks: Any, cfg: SelectorConfig, perf: PerfResult,
                 at_rest: Any = None) -> PerfResult:
    """Fills `perf` as it goes, so what was measured stays in the record if a later figure fails
    (a server that dies in the load test keeps its levels). at_rest: the variant's evaluation
    samples, the load test's answers are compared with (selector.measure.answers)."""
    from selector.measure.answers import AnswerScorer
    from selector.measure.latency import measure_latency, measure_throughput
    from selector.measure.traffic import SERVER_EXIT_GRACE_S, run_capacity, run_load

    m = cfg.measure
    if m.latency.enabled:
        perf.latency = measure_latency(running, m.latency)
    if m.throughput.enabled:
        perf.throughput = measure_throughput(running, m.throughput, latency=perf.latency)
    # one scorer for the ladder and the capacity search: its cache and sandbox budget are the variant's
    scorer = AnswerScorer.for_variant(tasks, cfg, at_rest) if m.load.enabled or m.load.capacity else None
    if m.load.enabled:
        perf.load = run_load(running, tasks, cfg, scorer)
        failed = [level for level in perf.load if level.errors]
        running.check_alive(f"the load test (first failed level: {_level_name(failed[0])}, {failed[0].errors} of "
                            f"{failed[0].requests} requests failed)" if failed else "the load test",
                            grace_s=SERVER_EXIT_GRACE_S if failed else 0.0)
    if m.load.capacity:  # on the same engine, after the ladder
        found = run_capacity(running, tasks, cfg, scorer)
        perf.capacity, perf.capacity_concurrency = found.get("rate"), found.get("concurrency")
    return perf


def _level_name(level: Any) -> str:
    return f"c={level.concurrency}" if level.concurrency is not None else f"{level.rate_rps:g} req/s"
