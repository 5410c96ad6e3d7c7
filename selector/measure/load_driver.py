"""The load-test driver: arrivals, SLOs, level summaries, and the loop that runs a ladder of levels.

A concurrency level keeps N requests in flight (closed loop); a rate level sends requests at seeded
exponential gaps whatever the server does (open loop). Every level is bounded by its request count
and by `max_duration_s` (requests still running then are cut off and counted as errors). A few
warm-up requests run first and are not counted. Where the requests come from and what serves them
is the caller's (selector.measure.traffic): this module only sends, times and summarizes.

The driver only awaits (sleeping event loop, blocking queues): it must not take the CPU it measures.
Its own CPU use is measured and logged per level.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from selector.config import LoadConfig
from selector.generation import GenerationRequest
from selector.trace import RequestTrace
from selector.errors import ConfigError
from selector.measure.percentiles import summarize
from selector.measure.saturation import SaturationWatch
from selector.engines.spec import Channel, Send
from selector.records import LoadLevel, Percentiles

log = logging.getLogger("selector.measure.traffic")

SLO_FIELDS = ("ttft_ms", "itl_ms", "e2e_ms", "queue_ms")
CUT_OFF = "cut off: the level reached measure.load.max_duration_s"
SPLIT_PARTS = ("queue_ms", "batch_wait_ms", "compute_ms")


# ---- pure logic: arrivals, SLOs, summaries ---------------------------------------------------
def poisson_arrivals(n: int, rate_rps: float, seed: int) -> list[float]:
    """Send times (seconds from the level's start) of a seeded Poisson process: the first at 0,
    then exponential gaps with mean 1/rate. Same seed, same times."""
    if rate_rps <= 0:
        raise ValueError(f"an arrival rate must be positive, got {rate_rps}")
    if n <= 0:
        return []
    gaps = np.random.default_rng(seed).exponential(1.0 / rate_rps, size=n - 1)
    return [0.0, *np.cumsum(gaps).tolist()]


_PERCENTILE_KEY = re.compile(r"^(?P<metric>[a-z0-9]+_ms)_p(?P<q>\d+(?:\.\d+)?)$")


def parse_slo_key(key: str) -> tuple[str, float | None]:
    """"e2e_ms" -> ("e2e_ms", None): a limit on every request (goodput); "e2e_ms_p95" ->
    ("e2e_ms", 95.0): a limit on the level's 95th percentile (capacity). Anything else is refused."""
    if key in SLO_FIELDS:
        return key, None
    match = _PERCENTILE_KEY.match(key)
    if match and match["metric"] in SLO_FIELDS and 0 < float(match["q"]) < 100:
        return match["metric"], float(match["q"])
    raise ConfigError("measure.load.slo", field=key,
                      problem=f"not a measured figure nor a percentile of one; known: {', '.join(SLO_FIELDS)} "
                              "(a limit per request, ms) or <figure>_p<NN> (a percentile, e.g. e2e_ms_p95)")


def check_slo(slo: dict[str, float]) -> None:
    for key, limit in slo.items():
        parse_slo_key(key)
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit <= 0:
            raise ConfigError("measure.load.slo", field=key, problem=f"must be a positive number of ms, got {limit!r}")


def per_request_slo(slo: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in slo.items() if k in SLO_FIELDS}


def meets_slo(trace: RequestTrace, slo: dict[str, float]) -> bool:
    """A successful request within every limit. A figure a request does not have (no inter-token
    gap in a one-token answer, no queue time from a server that hides it) is not held against it."""
    if not trace.ok:
        return False
    values = {"ttft_ms": trace.ttft_ms, "itl_ms": trace.itl_mean_ms, "e2e_ms": trace.e2e_ms, "queue_ms": trace.queue_ms}
    return all(values[k] is None or values[k] <= limit  # type: ignore[operator]
               for k, limit in per_request_slo(slo).items())


def _percentiles(values: Iterable[float | None]) -> Percentiles | None:
    kept = [v for v in values if v is not None]
    return summarize(kept) if kept else None


def level_duration(traces: Sequence[RequestTrace]) -> float:
    """First request sent to last request finished."""
    if not traces:
        return 0.0
    return max(t.end for t in traces) - min(t.sent for t in traces)


def summarize_level(traces: Sequence[RequestTrace], duration_s: float, slo: dict[str, float],
                    concurrency: int | None = None, rate_rps: float | None = None) -> LoadLevel:
    """One LoadLevel from its requests. Latency percentiles cover successful requests; the
    inter-token figure pools every gap between streamed tokens of every successful request."""
    ok = [t for t in traces if t.ok]
    per_s = (lambda x: x / duration_s) if duration_s > 0 else (lambda x: 0.0)
    e2e = _percentiles(t.e2e_ms for t in ok)
    level = LoadLevel(
        concurrency=concurrency,
        rate_rps=rate_rps,
        requests=len(traces),
        errors=len(traces) - len(ok),
        duration_s=duration_s,
        request_throughput=per_s(len(ok)),
        output_tokens_per_s=per_s(sum(t.output_tokens for t in ok)),
        input_tokens_per_s=per_s(sum(t.prompt_tokens for t in ok)) if any(t.prompt_tokens for t in ok) else None,
        ttft_ms=_percentiles(t.ttft_ms for t in ok),
        itl_ms=_percentiles(g for t in ok for g in t.itl_gaps_ms),
        e2e_ms=e2e,
        queue_ms=_percentiles(t.queue_ms for t in ok),
        batch_wait_ms=_percentiles(t.batch_wait_ms for t in ok),
        compute_ms=_percentiles(t.compute_ms for t in ok),
        goodput_rps=per_s(sum(meets_slo(t, slo) for t in ok)) if per_request_slo(slo) else None,
        tail_ms=tail_split(ok, e2e),
    )
    if level.tail_ms:
        level.split_source = "scheduler"
    return level


def tail_split(ok: Sequence[RequestTrace], e2e: Percentiles | None) -> dict[str, float]:
    """Mean e2e and mean of each part over the requests at or above the e2e p95 (at least the
    slowest one), when every such request carries its split; else empty."""
    if e2e is None:
        return {}
    tail = [t for t in ok if t.e2e_ms >= e2e.p95] or [max(ok, key=lambda t: t.e2e_ms)]
    out = {"e2e_ms": sum(t.e2e_ms for t in tail) / len(tail), "n": float(len(tail))}
    for part in SPLIT_PARTS:
        values = [getattr(t, part) for t in tail]
        if any(v is None for v in values):
            return {}
        out[part] = sum(values) / len(values)
    return out


# ---- the driver ----------------------------------------------------------------------------
async def drive_level(send: Send, requests: Sequence[GenerationRequest], *, concurrency: int | None = None,
                      rate_rps: float | None = None, seed: int = 0,
                      max_duration_s: float = 300.0, arrivals: Sequence[float] | None = None,
                      saturation: SaturationWatch | None = None,
                      until: Callable[[Sequence[float]], bool] | None = None) -> list[RequestTrace]:
    """Send every request once, N at a time (concurrency) or at Poisson times (rate_rps), or at
    the given send times (arrivals: seconds from the level's start, e.g. a recording's).
    until (closed loop): given the send times so far (seconds from the level's start), whether the
    level has sent enough (a probe of a set length; `requests` then only has to be long enough).

    Returns one trace per request that was sent, in request order. Past max_duration_s, nothing
    new is sent and requests still running are cancelled and recorded as errors; the same when
    `saturation` (open loop only) finds the level over-saturated, its reason in their error.
    """
    if (concurrency is None) == (rate_rps is None and arrivals is None):
        raise ValueError("give exactly one of concurrency, rate_rps and arrivals")
    started: dict[int, float] = {}
    traces: dict[int, RequestTrace] = {}

    async def one(i: int) -> None:
        started[i] = time.perf_counter()
        try:
            traces[i] = await send(requests[i])
        except Exception as e:  # a send that raises is a failed request, not a failed level
            traces[i] = RequestTrace(sent=started[i], end=time.perf_counter(), error=f"{type(e).__name__}: {e}"[:300])
        traces[i].item = requests[i].item  # whose answer it is (selector.measure.answers scores it)

    async def closed_loop() -> None:
        pending = iter(range(len(requests)))
        t0 = time.perf_counter()

        async def worker() -> None:
            for i in pending:  # a shared iterator: each worker takes the next request when free
                await one(i)
                if until is not None and until([t - t0 for t in started.values()]):
                    return

        await asyncio.gather(*(worker() for _ in range(min(concurrency or 1, len(requests)))))

    async def open_loop() -> None:
        t0 = time.perf_counter()
        tasks: list[asyncio.Task[None]] = []
        try:
            times = list(arrivals) if arrivals is not None else poisson_arrivals(len(requests), rate_rps or 1.0, seed)
            for i, at in enumerate(times):
                await asyncio.sleep(max(0.0, t0 + at - time.perf_counter()))
                tasks.append(asyncio.create_task(one(i)))
            await asyncio.gather(*tasks)
        finally:  # cancelled at the deadline: stop what is in flight too
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    body = closed_loop() if concurrency else open_loop()
    if saturation is not None and not concurrency:
        body = saturation.guard(body, started, traces)
    try:
        await asyncio.wait_for(body, timeout=max_duration_s)
    except TimeoutError:
        log.warning("load level %s stopped at max_duration_s=%g s", _label(concurrency, rate_rps), max_duration_s)
    now = time.perf_counter()
    cut = f"cut off: {saturation.reason}" if saturation is not None and saturation.reason else CUT_OFF
    for i, t0 in started.items():
        traces.setdefault(i, RequestTrace(sent=t0, end=now, error=cut, item=requests[i].item))
    return [traces[i] for i in sorted(traces)]


@dataclass
class LevelOutcome:
    level: LoadLevel
    traces: list[RequestTrace]
    harness_cpu_pct: float  # the load generator's own CPU, percent of available cores
    stopped: str = ""  # why the level ended early (over-saturated); "" when it ran to its end


def levels_of(cfg: LoadConfig) -> list[tuple[int | None, float | None]]:
    for c in cfg.concurrency:
        if int(c) < 1:
            raise ConfigError("measure.load.concurrency", problem=f"levels must be whole numbers >= 1, got {c!r}")
    for r in cfg.rates_rps:
        if r <= 0:
            raise ConfigError("measure.load.rates_rps", problem=f"rates must be positive, got {r!r}")
    out: list[tuple[int | None, float | None]] = [(int(c), None) for c in cfg.concurrency]
    out += [(None, float(r)) for r in cfg.rates_rps]
    if not out:
        raise ConfigError("measure.load", field="concurrency",
                          problem="no load levels: give concurrency and/or rates_rps")
    return out


@dataclass
class Probe:
    """What one level needs besides its requests: the engine's channel (how to send, whose
    utilisation to read, where a server's split comes from), the load config, and optionally how
    the level's answers are scored."""

    channel: Channel
    cfg: LoadConfig
    # The level's traces -> its answers scored against the variant's at rest (selector.measure.answers)
    answers: Callable[[Sequence[RequestTrace]], Any] | None = None

    async def warm_up(self, warmup: Sequence[GenerationRequest]) -> None:
        if not warmup:
            return
        done = await drive_level(self.channel.send, warmup, concurrency=1, max_duration_s=self.cfg.max_duration_s)
        failed = [t for t in done if not t.ok]
        if failed and len(failed) == len(done):
            raise RuntimeError(f"every warm-up request failed; the first: {failed[0].error}")

    async def level(self, requests: Sequence[GenerationRequest], concurrency: int | None = None,
                    rate: float | None = None, arrivals: Sequence[float] | None = None, seed: int | None = None,
                    saturation: SaturationWatch | None = None,
                    until: Callable[[Sequence[float]], bool] | None = None) -> LevelOutcome:
        """One level, measured: its traces, summary, utilisation and (servers) the metrics' split.
        seed: the Poisson arrivals' (default cfg.seed); saturation: end it early when over-saturated;
        until: a closed loop sends nothing new once it says so (drive_level)."""
        cfg = self.cfg
        channel = self.channel
        before = await channel.scrape() if channel.scrape else None
        counted = await channel.counters() if channel.counters else None
        meter = channel.monitor().start()
        traces = await drive_level(channel.send, requests, concurrency=concurrency, rate_rps=rate,
                                   seed=cfg.seed if seed is None else seed, max_duration_s=cfg.max_duration_s,
                                   arrivals=arrivals, saturation=saturation, until=until)
        usage = meter.stop()
        level = summarize_level(traces, level_duration(traces), cfg.slo, concurrency, rate)
        level.cpu_util_pct, level.gpu_util_pct = usage.cpu_util_pct, usage.gpu_util_pct
        level.gpu_mem_bytes, level.harness_cpu_pct = usage.gpu_mem_bytes, usage.harness_cpu_pct
        if channel.scrape and channel.split:
            after = await channel.scrape()
            for name, value in channel.split(before, after).items():
                if getattr(level, name) is None:
                    setattr(level, name, value)
            if channel.describe_split and not level.split_source:
                level.split_source, level.split_note = channel.describe_split(after)
        if channel.counters and channel.prefix_cache_hit_rate:
            level.prefix_cache_hit_rate = channel.prefix_cache_hit_rate(counted, await channel.counters())
        if self.answers is not None:  # after the clock, before the next level: nothing here is timed
            level.answers = self.answers(traces)
        if channel.after_level:
            channel.after_level()
        _log_level(level, usage.harness_cpu_pct)
        stopped = saturation.reason if saturation is not None else ""
        if stopped:
            log.warning("load %s ended early, %s", _label(concurrency, rate), stopped)
        return LevelOutcome(level, traces, usage.harness_cpu_pct, stopped)


def _label(concurrency: int | None, rate: float | None) -> str:
    if concurrency is not None:
        return f"c={concurrency}"
    return f"{rate:g} req/s" if rate is not None else "recorded arrivals"


def _log_level(level: LoadLevel, harness_pct: float) -> None:
    e2e, ttft = level.e2e_ms, level.ttft_ms
    log.info("load %s: %d requests, %d errors, %.2f req/s, %.1f tok/s, e2e p50 %s ms p95 %s ms, ttft p50 %s ms; "
             "measured CPU %s%%, harness CPU %.1f%%", _label(level.concurrency, level.rate_rps), level.requests,
             level.errors, level.request_throughput, level.output_tokens_per_s,
             f"{e2e.p50:.0f}" if e2e else "-", f"{e2e.p95:.0f}" if e2e else "-", f"{ttft.p50:.0f}" if ttft else "-",
             f"{level.cpu_util_pct:.0f}" if level.cpu_util_pct is not None else "-", harness_pct)
    if level.answers is not None:
        from selector.measure.answers import describe

        log.info("load %s %s", _label(level.concurrency, level.rate_rps), describe(level.answers))
    if harness_pct > 10.0:
        log.warning("the load generator used %.0f%% of the CPU at %s: latencies may be inflated", harness_pct,
                    _label(level.concurrency, level.rate_rps))
