"""Latency under load, for a variant: one fixed request set replayed at a concurrency ladder and
at Poisson rates (the driver, SLOs and summaries are in selector.measure.load_driver), and the
capacity search at the SLO (selector.measure.capacity) on the same warm engine.

The request set is the eval set's generation prompts (interleaved across tasks, cycled to
`requests_per_level`, each capped at `new_tokens` output tokens), or the rows of a request file
(measure.load.requests, selector.measure.requests: sessions in order, recorded arrival times
replayed as one more level), identical at every level, so levels and variants compare like for like.

Every engine takes them the same way: through its running engine's `session` (engines/spec.py),
whose `send` streams one timed request. In-process that is a dynamic batching scheduler in front of
the model, which splits each request's time into queue / batch wait / compute; a server's
Prometheus histograms, when it has them, give the queue / compute split.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from selector.config import SelectorConfig
from selector.engines.base import GenerationRequest
from selector.errors import ConfigError
from selector.engines.spec import Batching
from selector.measure.load_driver import (  # noqa: F401  (re-exported: the load test's one import path)
    CUT_OFF,
    Channel,
    SLO_FIELDS,
    LevelOutcome,
    Probe,
    check_slo,
    drive_level,
    level_duration,
    levels_of,
    meets_slo,
    poisson_arrivals,
    run_ladder,
    summarize_level,
)
from selector.measure.requests import (
    cycled,
    has_arrivals,
    read_request_file,
    recorded_arrivals,
    warmup_of,
)
from selector.records import CapacityResult, LoadLevel

T = TypeVar("T")

if TYPE_CHECKING:
    from selector.config import LoadConfig


# ---- the request set -------------------------------------------------------------------------
def load_requests(tasks: Sequence[Any], model_name: str, prompt_style: str, n: int,
                  new_tokens: int) -> list[GenerationRequest]:
    """n requests from the eval set: generation prompts interleaved across tasks (multiple-choice
    contexts only when there are no generation tasks), cycled, each with `new_tokens` output tokens."""
    from selector.tasks import build_prompt, build_requests, resolve_style

    per_task: list[list[GenerationRequest]] = []
    for task in tasks:
        if task.type == "generate":
            per_task.append(list(build_requests(task, model_name, prompt_style)))  # type: ignore[arg-type]
    if not per_task:  # only multiple choice: their contexts still make realistic prompts
        for task in tasks:
            style = resolve_style(task, model_name, prompt_style)
            per_task.append([GenerationRequest(build_prompt(task, item, style), new_tokens) for item in task.items])
    pool = [r for group in _interleave(per_task) for r in group]
    if not pool:
        raise ConfigError("evalset", problem="the eval set has no items to build load-test requests from")
    return [GenerationRequest(pool[i % len(pool)].prompt, new_tokens, list(pool[i % len(pool)].stop))
            for i in range(n)]


def variant_requests(
    tasks: Sequence[Any], cfg: SelectorConfig, tokenizer: Any = None
) -> tuple[list[GenerationRequest], list[GenerationRequest]]:
    """(warm-up requests, measured requests) for a variant: the rows of measure.load.requests when
    given (every row, every level; a trace's prompts synthesised with `tokenizer`, the model's or
    its folder), else the eval set's prompts cycled to requests_per_level."""
    load = cfg.measure.load
    if load.requests:
        rows = read_request_file(load.requests, load.new_tokens, chat=cfg.model.prompt_style == "chat",
                                 tokenizer=tokenizer, seed=load.seed)
        return warmup_of(rows, load.warmup_requests), list(rows)
    every = load_requests(tasks, cfg.model.name, cfg.model.prompt_style, load.warmup_requests + load.requests_per_level,
                          load.new_tokens)
    return every[: load.warmup_requests], every[load.warmup_requests :]


def capacity_requests(tasks: Sequence[Any], cfg: SelectorConfig, tokenizer: Any = None
                      ) -> tuple[list[GenerationRequest], list[GenerationRequest]]:
    """(warm-up, one capacity step's requests): the same source, cycled to requests_per_step."""
    from selector.measure.capacity import requests_per_step

    warmup, requests = variant_requests(tasks, cfg, tokenizer)
    n = requests_per_step(cfg.measure.load)
    if cfg.measure.load.requests:
        return warmup, list(cycled(requests, n))  # type: ignore[arg-type]
    return warmup, [requests[i % len(requests)] for i in range(n)]


def _replay(requests: Sequence[GenerationRequest], cfg: LoadConfig) -> list[float] | None:
    return recorded_arrivals(requests, cfg.time_scale) if has_arrivals(requests) else None


async def ladder(probe: Probe, requests: Sequence[GenerationRequest], warmup: Sequence[GenerationRequest] = (),
                 replay: Sequence[float] | None = None) -> list[LevelOutcome]:
    return await run_ladder(probe.send, requests, probe.cfg, probe.monitor, warmup=warmup,
                            after_level=probe.after_level, scrape=probe.scrape, split=probe.split,
                            describe_split=probe.describe_split, replay=replay, counters=probe.counters)


async def capacity(probe: Probe, requests: Sequence[GenerationRequest],
                   warmup: Sequence[GenerationRequest] = ()) -> dict[str, CapacityResult]:
    """The capacity searches (measure.load.capacity_on: rate, concurrency or both) on a warm
    engine: one warm-up, then every probe on the same engine. A rate probe may run past
    max_duration_s by its own arrival span (slow rates need long probes); run k's arrivals have the
    seed seed + k; an over-saturated rate probe ends early (capacity_stop_saturated)."""
    from selector.measure.capacity import check_capacity, search_capacity, searched_axes
    from selector.measure.saturation import SaturationWatch

    check_slo(probe.cfg.slo)
    check_capacity(probe.cfg)
    await probe.warm_up(warmup)

    def at_rate(rate: float, run: int) -> Awaitable[LevelOutcome]:
        limit = probe.cfg.max_duration_s + len(requests) / rate
        step = dataclasses.replace(probe, cfg=dataclasses.replace(probe.cfg, max_duration_s=limit))
        watch = SaturationWatch.for_rate(rate) if probe.cfg.capacity_stop_saturated else None
        return step.level(requests, rate=rate, seed=probe.cfg.seed + run, saturation=watch)

    def at_concurrency(concurrency: float, run: int) -> Awaitable[LevelOutcome]:
        return probe.level(requests, concurrency=int(concurrency))

    return {on: await search_capacity(at_rate if on == "rate" else at_concurrency, probe.cfg, on)
            for on in searched_axes(probe.cfg)}


def _interleave(groups: list[list[GenerationRequest]]) -> list[list[GenerationRequest]]:
    """Round-robin: [[a1, b1, c1], [a2, b2], ...] so every level mixes every task."""
    longest = max((len(g) for g in groups), default=0)
    return [[g[i] for g in groups if i < len(g)] for i in range(longest)]


# ---- through the running engine ------------------------------------------------------------------
def on_engine(running: Any, batching: Batching, body: Callable[[Channel], Awaitable[T]]) -> T:
    """body(channel) in an event loop, with the running engine's session open."""

    async def main() -> T:
        async with running.session(batching) as channel:
            return await body(channel)

    return asyncio.run(main())


def load_batching(cfg: LoadConfig) -> Batching:
    """The in-process batcher of the load test (measure.load.max_batch_size, max_queue_delay_ms)."""
    return Batching(cfg.max_batch_size, cfg.max_queue_delay_ms)


def run_load(running: Any, tasks: Sequence[Any], cfg: SelectorConfig) -> list[LoadLevel]:
    """The load test of a variant through its running engine, for PerfResult.load (a trace's
    prompts synthesised with the engine's tokenizer)."""
    load = cfg.measure.load
    warmup, requests = variant_requests(tasks, cfg, running.tokenizer)
    running.prepare([*warmup, *requests])
    outcomes = on_engine(running, load_batching(load),
                         lambda channel: ladder(channel.probe(load), requests, warmup, _replay(requests, load)))
    return [o.level for o in outcomes]


def run_capacity(running: Any, tasks: Sequence[Any], cfg: SelectorConfig) -> dict[str, CapacityResult]:
    """The capacity searches (measure.load.capacity_on) through the variant's running engine, for
    PerfResult.capacity (rate) and capacity_concurrency."""
    load = cfg.measure.load
    warmup, requests = capacity_requests(tasks, cfg, running.tokenizer)
    running.prepare([*warmup, *requests])
    return on_engine(running, load_batching(load), lambda channel: capacity(channel.probe(load), requests, warmup))


def load_levels(running: Any, requests: Sequence[GenerationRequest], cfg: LoadConfig,
                warmup: Sequence[GenerationRequest] = ()) -> list[LevelOutcome]:
    """A ladder of these requests through the running engine, with every level's traces."""
    running.prepare([*warmup, *requests])
    return on_engine(running, load_batching(cfg),
                     lambda channel: ladder(channel.probe(cfg), requests, warmup, _replay(requests, cfg)))
