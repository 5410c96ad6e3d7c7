"""Latency under load, for a variant: one fixed request set replayed at a concurrency ladder and
at Poisson rates (the driver, SLOs and summaries are in selector.measure.load_driver), and the
capacity search at the SLO (selector.measure.capacity) on the same warm engine.

The request set is the eval set's generation prompts (interleaved across tasks, cycled to
`requests_per_level`, each capped at `new_tokens` output tokens), or the rows of a request file
(measure.load.requests, selector.measure.requests: sessions in order, recorded arrival times
replayed as one more level), identical at every level, so levels and variants compare like for like.

Two ways in, one driver:
- in-process: requests go through a dynamic batching scheduler in front of the model (no HTTP),
  which splits each request's time into queue / batch wait / compute;
- a server: streamed requests over HTTP (asyncio + httpx), timed in the client; the server's
  Prometheus histograms, when it has them, give the queue / compute split.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from selector.config import SelectorConfig
from selector.engines.base import GenerationRequest
from selector.engines.trace import RequestTrace
from selector.errors import ConfigError
from selector.measure.load_driver import (  # noqa: F401  (re-exported: the load test's one import path)
    CUT_OFF,
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
    Conversations,
    cycled,
    has_arrivals,
    read_request_file,
    recorded_arrivals,
    warmup_of,
)
from selector.measure.utilization import UtilizationMonitor, nvml_indices, own_process, process_cpu_seconds
from selector.records import CapacityResult, LoadLevel

T = TypeVar("T")

if TYPE_CHECKING:
    from selector.config import LoadConfig
    from selector.serving.session import Served


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


# ---- in-process: the dynamic batching scheduler ------------------------------------------------
def run_inprocess_load(model: Any, tokenizer: Any, tasks: Sequence[Any], cfg: SelectorConfig) -> list[LoadLevel]:
    """The load test of a variant's in-process model, for PerfResult.load."""
    warmup, requests = variant_requests(tasks, cfg, tokenizer)
    return [o.level for o in inprocess_load(model, tokenizer, requests, cfg.measure.load, warmup=warmup)]


def run_inprocess_capacity(model: Any, tokenizer: Any, tasks: Sequence[Any], cfg: SelectorConfig
                           ) -> dict[str, CapacityResult]:
    """The capacity searches on a variant's in-process model, for PerfResult.capacity (rate) and
    capacity_concurrency."""
    warmup, requests = capacity_requests(tasks, cfg, tokenizer)
    return inprocess_run(model, tokenizer, cfg.measure.load, [*warmup, *requests],
                         lambda probe: capacity(probe, requests, warmup))


def inprocess_load(model: Any, tokenizer: Any, requests: Sequence[GenerationRequest], cfg: LoadConfig,
                   warmup: Sequence[GenerationRequest] = ()) -> list[LevelOutcome]:
    return inprocess_run(model, tokenizer, cfg, [*warmup, *requests],
                         lambda probe: ladder(probe, requests, warmup, _replay(requests, cfg)))


def inprocess_run(model: Any, tokenizer: Any, cfg: LoadConfig, ahead: Sequence[GenerationRequest],
                  body: Callable[[Probe], Awaitable[T]]) -> T:
    """body(probe) with a dynamic batching scheduler in front of the model. `ahead` is tokenized
    before timing starts; a session turn (its prompt is the conversation so far) when it is sent."""
    from selector.engines.hf import HFEngine
    from selector.serving.batching import BatchingScheduler

    hf = HFEngine(model, tokenizer)  # for its prompt rendering and token ids
    encoded = {id(r): hf.encode(r.prompt) for r in ahead}
    device = next(model.parameters()).device
    gpus = nvml_indices([device.index or 0]) if device.type == "cuda" else []
    with BatchingScheduler(model, tokenizer, cfg.max_batch_size, cfg.max_queue_delay_ms,
                           eos_ids=hf.eos_ids, pad_id=hf.pad_id) as scheduler:

        async def main() -> T:
            loop = asyncio.get_running_loop()

            async def send(request: GenerationRequest) -> RequestTrace:
                done: asyncio.Future[RequestTrace] = loop.create_future()

                def deliver(trace: RequestTrace) -> None:  # on the scheduler thread
                    loop.call_soon_threadsafe(lambda: done.done() or done.set_result(trace))

                ids = encoded.get(id(request)) or hf.encode(request.prompt)
                scheduler.submit(ids, request.max_new_tokens, request.stop, deliver)
                return await done

            # The harness is this event loop's thread; the model runs on the scheduler's.
            def monitor() -> UtilizationMonitor:
                return UtilizationMonitor(own_process, time.thread_time, gpus, subtract_harness=True)

            return await body(Probe(Conversations().wrap(send), cfg, monitor, after_level=scheduler.drain))

        return asyncio.run(main())


# ---- a server --------------------------------------------------------------------------------
def run_server_load(served: Served, tasks: Sequence[Any], cfg: SelectorConfig,
                    tokenizer: Any = None) -> list[LoadLevel]:
    """The load test of a served variant (engine=openai), for PerfResult.load. tokenizer: the
    checkpoint folder (a trace's prompts are synthesised with its tokenizer)."""
    warmup, requests = variant_requests(tasks, cfg, tokenizer)
    return [o.level for o in server_load(served, requests, cfg.measure.load, warmup=warmup)]


def run_server_capacity(served: Served, tasks: Sequence[Any], cfg: SelectorConfig,
                        tokenizer: Any = None) -> dict[str, CapacityResult]:
    """The capacity searches against a served variant's running server, for PerfResult.capacity
    (rate) and capacity_concurrency."""
    warmup, requests = capacity_requests(tasks, cfg, tokenizer)
    return server_run(served, cfg.measure.load, lambda probe: capacity(probe, requests, warmup))


def server_load(served: Served, requests: Sequence[GenerationRequest], cfg: LoadConfig,
                warmup: Sequence[GenerationRequest] = ()) -> list[LevelOutcome]:
    return server_run(served, cfg, lambda probe: ladder(probe, requests, warmup, _replay(requests, cfg)))


def server_run(served: Served, cfg: LoadConfig, body: Callable[[Probe], Awaitable[T]]) -> T:
    """body(probe) against the variant's server: streamed requests over one HTTP client."""
    from selector.serving import prometheus

    engine = served.engine
    metrics_urls = served.metrics_urls()  # every instance's
    this_process = own_process()

    async def main() -> T:
        async with engine.client(max_connections=None) as client:

            async def send(request: GenerationRequest) -> RequestTrace:
                return await engine.stream(client, request)

            def monitor() -> UtilizationMonitor:
                # Everything this process does during a level is the load generator's work.
                harness = lambda: sum(process_cpu_seconds(this_process).values())  # noqa: E731
                return UtilizationMonitor(served.processes if served.servers else None, harness,
                                          None if served.local else [], subtract_harness=False)

            return await body(Probe(Conversations().wrap(send), cfg, monitor,
                                    scrape=lambda: prometheus.scrape_all(client, metrics_urls),
                                    split=prometheus.level_split, describe_split=prometheus.split_source,
                                    counters=lambda: prometheus.scrape_counters(client, metrics_urls)))

    return asyncio.run(main())
