"""Latency under load, for a variant: one fixed request set replayed at a concurrency ladder and
at Poisson rates (the driver, SLOs and summaries are in selector.measure.load_driver).

The request set is the eval set's generation prompts (interleaved across tasks, cycled to
`requests_per_level`, each capped at `new_tokens` output tokens), identical at every level, so
levels and variants compare like for like.

Two ways in, one driver:
- in-process: requests go through a dynamic batching scheduler in front of the model (no HTTP),
  which splits each request's time into queue / batch wait / compute;
- a server: streamed requests over HTTP (asyncio + httpx), timed in the client; the server's
  Prometheus histograms, when it has them, give the queue / compute split.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from selector.config import SelectorConfig
from selector.engines.base import GenerationRequest
from selector.engines.trace import RequestTrace
from selector.errors import ConfigError
from selector.measure.load_driver import (  # noqa: F401  (re-exported: the load test's one import path)
    CUT_OFF,
    SLO_FIELDS,
    LevelOutcome,
    check_slo,
    drive_level,
    level_duration,
    levels_of,
    meets_slo,
    poisson_arrivals,
    run_ladder,
    summarize_level,
)
from selector.measure.utilization import UtilizationMonitor, nvml_indices, own_process, process_cpu_seconds
from selector.types import LoadLevel

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
    tasks: Sequence[Any], cfg: SelectorConfig
) -> tuple[list[GenerationRequest], list[GenerationRequest]]:
    """(warm-up requests, measured requests) for a variant, from its eval set and load settings."""
    load = cfg.measure.load
    every = load_requests(tasks, cfg.model.name, cfg.model.prompt_style, load.warmup_requests + load.requests_per_level,
                          load.new_tokens)
    return every[: load.warmup_requests], every[load.warmup_requests :]


def _interleave(groups: list[list[GenerationRequest]]) -> list[list[GenerationRequest]]:
    """Round-robin: [[a1, b1, c1], [a2, b2], ...] so every level mixes every task."""
    longest = max((len(g) for g in groups), default=0)
    return [[g[i] for g in groups if i < len(g)] for i in range(longest)]


# ---- in-process: the dynamic batching scheduler ------------------------------------------------
def run_inprocess_load(model: Any, tokenizer: Any, tasks: Sequence[Any], cfg: SelectorConfig) -> list[LoadLevel]:
    """The load test of a variant's in-process model, for PerfResult.load."""
    warmup, requests = variant_requests(tasks, cfg)
    return [o.level for o in inprocess_load(model, tokenizer, requests, cfg.measure.load, warmup=warmup)]


def inprocess_load(model: Any, tokenizer: Any, requests: Sequence[GenerationRequest], cfg: LoadConfig,
                   warmup: Sequence[GenerationRequest] = ()) -> list[LevelOutcome]:
    from selector.engines.hf import HFEngine
    from selector.serving.batching import BatchingScheduler

    hf = HFEngine(model, tokenizer)  # for its prompt rendering and token ids
    encoded = {id(r): hf.encode(r.prompt) for r in [*warmup, *requests]}  # tokenized before timing starts
    device = next(model.parameters()).device
    gpus = nvml_indices([device.index or 0]) if device.type == "cuda" else []
    with BatchingScheduler(model, tokenizer, cfg.max_batch_size, cfg.max_queue_delay_ms,
                           eos_ids=hf.eos_ids, pad_id=hf.pad_id) as scheduler:

        async def main() -> list[LevelOutcome]:
            loop = asyncio.get_running_loop()

            async def send(request: GenerationRequest) -> RequestTrace:
                done: asyncio.Future[RequestTrace] = loop.create_future()

                def deliver(trace: RequestTrace) -> None:  # on the scheduler thread
                    loop.call_soon_threadsafe(lambda: done.done() or done.set_result(trace))

                scheduler.submit(encoded[id(request)], request.max_new_tokens, request.stop, deliver)
                return await done

            # The harness is this event loop's thread; the model runs on the scheduler's.
            monitor = lambda: UtilizationMonitor(own_process, time.thread_time, gpus, subtract_harness=True)  # noqa: E731
            return await run_ladder(send, requests, cfg, monitor, warmup=warmup, after_level=scheduler.drain)

        return asyncio.run(main())


# ---- a server --------------------------------------------------------------------------------
def run_server_load(served: Served, tasks: Sequence[Any], cfg: SelectorConfig) -> list[LoadLevel]:
    """The load test of a served variant (engine=openai), for PerfResult.load."""
    warmup, requests = variant_requests(tasks, cfg)
    return [o.level for o in server_load(served, requests, cfg.measure.load, warmup=warmup)]


def server_load(served: Served, requests: Sequence[GenerationRequest], cfg: LoadConfig,
                warmup: Sequence[GenerationRequest] = ()) -> list[LevelOutcome]:
    from selector.serving import prometheus

    engine = served.engine
    metrics_url = engine.root_url + "/metrics"
    this_process = own_process()

    async def main() -> list[LevelOutcome]:
        async with engine.client(max_connections=None) as client:

            async def send(request: GenerationRequest) -> RequestTrace:
                return await engine.stream(client, request)

            def monitor() -> UtilizationMonitor:
                # Everything this process does during a level is the load generator's work.
                harness = lambda: sum(process_cpu_seconds(this_process).values())  # noqa: E731
                return UtilizationMonitor(served.processes if served.server else None, harness,
                                          None if served.local else [], subtract_harness=False)

            return await run_ladder(send, requests, cfg, monitor, warmup=warmup,
                                    scrape=lambda: prometheus.scrape(client, metrics_url), split=prometheus.level_split,
                                    describe_split=prometheus.split_source)

    return asyncio.run(main())
