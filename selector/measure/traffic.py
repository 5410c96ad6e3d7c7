"""Latency under load, for a variant: one fixed request set replayed at a concurrency ladder and
at Poisson rates (the driver, SLOs and summaries are in selector.measure.load_driver), and the
capacity search at the SLO (selector.measure.capacity) on the same warm engine.

The request set is the eval set's generation prompts (interleaved across tasks, cycled to
`requests_per_level`, each capped at `new_tokens` output tokens), or the rows of a request file
(measure.load.requests, selector.measure.requests: sessions in order, recorded arrival times
replayed as one more level), identical at every level, so levels and variants compare like for like;
each level sends them with fresh prefix-cache salts (selector.measure.requests.salted), so a
server's prefix cache serves a request only what its traffic declares shared, never what an
earlier level or the warm-up sent (docs/load-testing.md, "Fresh prompts").

Every engine takes them the same way: through its running engine's `session` (engines/spec.py),
whose `send` streams one timed request. In-process that is a dynamic batching scheduler in front of
the model, which splits each request's time into queue / batch wait / compute; a server's
Prometheus histograms, when it has them, give the queue / compute split.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from selector.config import SelectorConfig
from selector.generation import GenerationRequest, ItemRef
from selector.errors import ConfigError
from selector.engines.spec import Batching, Channel, Running, ServerDiedError
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
    summarize_level,
)
from selector.measure.requests import (
    has_arrivals,
    read_request_file,
    recorded_arrivals,
    salted,
    warmup_of,
)
from selector.measure.answers import AnswerScorer
from selector.records import CapacityResult, LoadLevel

T = TypeVar("T")
CONFIRM_SEED = 10_000  # the confirmation's arrivals: a seed no search run uses
# Failed requests may be a server on its way out: how long to wait for it to be seen exited.
SERVER_EXIT_GRACE_S = 5.0

if TYPE_CHECKING:
    from selector.config import LoadConfig


# ---- the request set -------------------------------------------------------------------------
def load_requests(tasks: Sequence[Any], model_name: str, prompt_style: str, n: int,
                  new_tokens: int) -> list[GenerationRequest]:
    """n requests from the eval set: generation prompts interleaved across tasks (multiple-choice
    contexts only when there are no generation tasks), cycled. Each generation request carries its
    item (GenerationRequest.item, so its answer is scored: selector.measure.answers) and asks for
    its task's own answer length when that fits within `new_tokens`, so its answer is the one the
    evaluation would give; a task whose answers are longer gets `new_tokens` (its answers are cut,
    and not scored). A multiple-choice context gets `new_tokens` and no item: nothing generated at
    rest to compare it with."""
    from selector.tasks import build_prompt, build_requests, resolve_style

    per_task: list[list[GenerationRequest]] = []
    for task in tasks:
        if task.type == "generate":
            cap = task.max_new_tokens if task.max_new_tokens <= new_tokens else new_tokens
            generated = cast("list[GenerationRequest]", build_requests(task, model_name, prompt_style))  # a generate task's
            per_task.append([dataclasses.replace(r, max_new_tokens=cap, item=ItemRef(task.name, item.id))
                             for r, item in zip(generated, task.items)])
    if not per_task:  # only multiple choice: their contexts still make realistic prompts
        for task in tasks:
            style = resolve_style(task, model_name, prompt_style)
            per_task.append([GenerationRequest(build_prompt(task, item, style), new_tokens) for item in task.items])
    pool = [r for group in _interleave(per_task) for r in group]
    if not pool:
        raise ConfigError("evalset", problem="the eval set has no items to build load-test requests from")
    return [dataclasses.replace(pool[i % len(pool)], stop=list(pool[i % len(pool)].stop)) for i in range(n)]


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
    """(warm-up, the pool every capacity probe cycles through): the load test's own requests."""
    return variant_requests(tasks, cfg, tokenizer)


class ProbeRequests(Sequence[GenerationRequest]):
    """A probe's requests: the pool cycled to n, each pass through it salted afresh (`salted`), so
    no request finds another's prompt in a server's prefix cache unless the traffic declares the
    sharing (a trace's hash_ids, within one pass). Built lazily: a closed-loop probe of a set
    length takes only what it sends."""

    def __init__(self, pool: Sequence[GenerationRequest], n: int, tag: str) -> None:
        self.pool, self.n, self.tag = list(pool), n, tag
        self.passes: dict[int, list[GenerationRequest]] = {}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> GenerationRequest:  # type: ignore[override]
        if not 0 <= i < self.n:
            raise IndexError(i)
        k, j = divmod(i, len(self.pool))
        if k not in self.passes:
            self.passes[k] = salted(self.pool, f"{self.tag}.{k}")
        return self.passes[k][j]


async def drained(outcome: LevelOutcome, most_s: float) -> None:
    """After a probe cut off as over-saturated, wait about as long as the server needs to finish or
    drop what was cut (the cut requests at the rate it was completing them, at most most_s), so the
    next probe starts on a server that is not still working through this one's backlog."""
    if not outcome.stopped:
        return
    cut = sum(1 for t in outcome.traces if not t.ok)
    rate = max(outcome.level.request_throughput, 0.1)
    await asyncio.sleep(min(most_s, cut / rate))


def _replay(requests: Sequence[GenerationRequest], cfg: LoadConfig) -> list[float] | None:
    return recorded_arrivals(requests, cfg.time_scale) if has_arrivals(requests) else None


async def ladder(probe: Probe, requests: Sequence[GenerationRequest], warmup: Sequence[GenerationRequest] = (),
                 replay: Sequence[float] | None = None) -> list[LevelOutcome]:
    """Warm up, then every level of probe.cfg in order (recorded arrivals, when given, as one more
    level after them: the only one without concurrency or rates), as run_ladder does, but each
    level, and the warm-up, with fresh prefix-cache salts (`salted`): no level reads from a
    server's prefix cache what the warm-up or an earlier level sent, and within a level only what
    the traffic declares shared, so the levels' hit rates and throughput compare like for like."""
    cfg = probe.cfg
    check_slo(cfg.slo)
    levels = levels_of(cfg) if replay is None or cfg.concurrency or cfg.rates_rps else []
    await probe.warm_up(salted(warmup, "warmup"))
    outcomes = []
    for concurrency, rate in levels:
        tag = f"c{concurrency}" if concurrency is not None else f"r{rate:g}"
        outcomes.append(await probe.level(salted(requests, tag), concurrency, rate))
    if replay is not None:
        outcome = await probe.level(salted(requests, "recorded"), arrivals=replay)
        outcome.level.replay_scale = cfg.time_scale
        outcomes.append(outcome)
    return outcomes


async def capacity(probe: Probe, requests: Sequence[GenerationRequest],
                   warmup: Sequence[GenerationRequest] = ()) -> dict[str, CapacityResult]:
    """The capacity searches (measure.load.capacity_on: rate, concurrency or both) on a warm
    engine: one warm-up, then every probe on the same engine, each of the steady-state length of
    selector.measure.steady, its requests cycled from `requests` and salted afresh. A probe may run
    past max_duration_s by its own span; run k's arrivals have the seed seed + k; an over-saturated
    rate probe ends early (capacity_stop_saturated)."""
    from selector.measure.capacity import check_capacity, confirm, search_capacity
    from selector.measure.capacity_axis import searched_axes
    from selector.measure.saturation import SaturationWatch
    from selector.measure.steady import ProbeLength

    cfg = probe.cfg
    check_slo(cfg.slo)
    check_capacity(cfg)
    await probe.warm_up(warmup)
    length = ProbeLength.of(cfg)
    probes = iter(range(10**9))  # each probe's salts are its own

    async def at_rate(rate: float, run: int) -> LevelOutcome:
        span = length.span_at(rate)
        step = dataclasses.replace(probe, cfg=dataclasses.replace(cfg, max_duration_s=cfg.max_duration_s + span))
        watch = SaturationWatch.for_rate(rate) if cfg.capacity_stop_saturated else None
        sent = ProbeRequests(requests, length.requests_at(rate), f"p{next(probes)}")
        outcome = await step.level(sent, rate=rate, seed=cfg.seed + run, saturation=watch)
        await drained(outcome, cfg.max_duration_s)
        return outcome

    def at_concurrency(concurrency: float, run: int) -> Awaitable[LevelOutcome]:
        span = length.warmup_s + length.window_s
        step = dataclasses.replace(probe, cfg=dataclasses.replace(cfg, max_duration_s=cfg.max_duration_s + span))
        sent = ProbeRequests(requests, 10**7, f"p{next(probes)}")  # taken as sent, until length.closed_done
        return step.level(sent, concurrency=int(concurrency), until=length.closed_done)

    def for_seconds(rate: float, seconds: float) -> Awaitable[LevelOutcome]:
        step = dataclasses.replace(probe, cfg=dataclasses.replace(cfg, max_duration_s=cfg.max_duration_s + seconds))
        sent = ProbeRequests(requests, max(1, math.ceil(rate * seconds)), "confirm")
        # Minutes near capacity: the probes' short windows would end it on a queue's ordinary wandering
        # (at 0.9 of the service rate they end 14% of 25 s probes); a backlog that grows for a quarter of
        # the run still ends it.
        watch = SaturationWatch(window_s=max(SaturationWatch.for_rate(rate).window_s, seconds / 16)) \
            if cfg.capacity_stop_saturated else None
        return step.level(sent, rate=rate, seed=cfg.seed + CONFIRM_SEED, saturation=watch)

    found = {on: await search_capacity(at_rate if on == "rate" else at_concurrency, cfg, on)
             for on in searched_axes(cfg)}
    planned = found.get("rate") or found["concurrency"]  # what a plan in req/s stands on
    planned.confirmation = await confirm(for_seconds, planned, cfg)
    return found


def _interleave(groups: list[list[GenerationRequest]]) -> list[list[GenerationRequest]]:
    """Round-robin: [[a1, b1, c1], [a2, b2], ...] so every level mixes every task."""
    longest = max((len(g) for g in groups), default=0)
    return [[g[i] for g in groups if i < len(g)] for i in range(longest)]


# ---- through the running engine ------------------------------------------------------------------
def on_engine(running: Running, batching: Batching, body: Callable[[Channel], Awaitable[T]]) -> T:
    """body(channel) in an event loop, with the running engine's session open."""

    async def main() -> T:
        async with running.session(batching) as channel:
            return await body(channel)

    return asyncio.run(main())


def load_batching(cfg: LoadConfig) -> Batching:
    """The in-process batcher of the load test (measure.load.max_batch_size, max_queue_delay_ms)."""
    return Batching(cfg.max_batch_size, cfg.max_queue_delay_ms)


def run_load(running: Running, tasks: Sequence[Any], cfg: SelectorConfig,
             scorer: AnswerScorer | None = None) -> list[LoadLevel]:
    """The load test of a variant through its running engine, for PerfResult.load (a trace's
    prompts synthesised with the engine's tokenizer). scorer: what scores every level's answers
    against the variant's at rest (AnswerScorer.for_variant; None: they are not scored)."""
    load = cfg.measure.load
    warmup, requests = variant_requests(tasks, cfg, running.tokenizer)
    running.prepare([*warmup, *requests])
    outcomes = on_engine(running, load_batching(load), lambda channel: ladder(
        scoring(Probe(channel, load), scorer), requests, warmup, _replay(requests, load)))
    return [o.level for o in outcomes]


def run_capacity(running: Running, tasks: Sequence[Any], cfg: SelectorConfig,
                 scorer: AnswerScorer | None = None) -> dict[str, CapacityResult]:
    """The capacity searches (measure.load.capacity_on) through the variant's running engine, for
    PerfResult.capacity (rate) and capacity_concurrency; every probe's and the confirmation's
    answers scored by `scorer`, as run_load's levels."""
    load = cfg.measure.load
    warmup, requests = capacity_requests(tasks, cfg, running.tokenizer)
    running.prepare([*warmup, *requests])
    found = on_engine(running, load_batching(load),
                      lambda channel: capacity(scoring(Probe(channel, load), scorer), requests, warmup))
    _server_died(running, found)
    return found


def scoring(probe: Probe, scorer: AnswerScorer | None) -> Probe:
    """The probe with every level's answers scored (scorer None: as it is)."""
    return probe if scorer is None else dataclasses.replace(probe, answers=scorer.level)


def _server_died(running: Running, found: dict[str, CapacityResult]) -> None:
    """A confirmation run with failed requests may be a server that died during it (the channel
    cannot see the server; the running engine can): then the plan fails with the server's status
    and its log's last lines in the confirmation's note, and the search's result stays."""

    planned = found.get("rate") or found.get("concurrency")
    trial = planned.confirmation if planned is not None else None
    if trial is None or not trial.level.errors:
        return
    try:
        running.check_alive("the capacity search's confirmation run", grace_s=SERVER_EXIT_GRACE_S)
    except ServerDiedError as e:
        trial.held = False
        trial.note = "; ".join(x for x in (trial.note, str(e)) if x)


def load_levels(running: Running, requests: Sequence[GenerationRequest], cfg: LoadConfig,
                warmup: Sequence[GenerationRequest] = ()) -> list[LevelOutcome]:
    """A ladder of these requests through the running engine, with every level's traces."""
    running.prepare([*warmup, *requests])
    return on_engine(running, load_batching(cfg),
                     lambda channel: ladder(Probe(channel, cfg), requests, warmup, _replay(requests, cfg)))
