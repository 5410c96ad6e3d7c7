"""Capacity at the SLO: the highest open-loop arrival rate (capacity_on=rate) or closed-loop
concurrency (capacity_on=concurrency) whose requests meet measure.load.slo's percentile limits
(e.g. e2e_ms_p95: 4000) in the server's steady state, with a confidence interval from repeated
runs; found per variant on its warm engine or server.

The method (docs/load-testing.md, "Capacity at the SLO"):
- a probe is one run of one level, long enough to reach its steady state (selector.measure.steady):
  it sends for capacity_warmup_s + capacity_probe_s seconds (at least capacity_probe_requests
  judged), and only the requests sent after the warm-up are judged. Its margin is
  log((estimate + rise) / limit) for the limit it misses most, where the estimate is the window's
  percentile and the rise how much that figure grew across the window (a growing backlog); a failed
  or cut-off request counts as infinitely slow. It is within the SLO when the margin is <= 0;
- run 0 locates the boundary: from the start level, double while probes pass, or halve while they
  fail, then bisect until the bracket is within capacity_tolerance of its low end (a concurrency:
  or one request apart), at most capacity_max_steps probes;
- runs 1 .. capacity_repeats-1 each find their own crossing: a probe at the current estimate, then
  probes ever further away (by (1 + 2 tolerance)^1, ^2, ^4) until the SLO flips, at most
  RUN_PROBES. A run's Poisson arrivals have their own seed (seed + run), the same at every rate of
  that run, so within a run rates differ only in the gaps' scale and its margins rise with the rate;
- a run's crossing: its margins made monotone in the level (isotonic regression; a probe cut off
  as over-saturated has an infinite margin, and every level at or above it fails), then the level
  where that fit crosses 0, interpolated linearly in (log level, margin) between the two probes
  around it (their geometric mean when the upper one's margin is infinite);
- the capacity is the geometric mean of the runs' crossings, its interval Student's t on their
  logarithms at capacity_confidence (runs are independent, so the spread between them is what a
  second run would move it by, requests inside a probe being far from independent under queueing);
  none of them is put above the most requests per second any probe saw the server complete;
- all runs' probes of one level, combined (mean margin, made monotone over the levels), say which
  levels the report calls within the SLO; a level where runs disagree makes the capacity straddle
  the SLO, and the result says so.

The search only calls `probe(level, run)`: whatever drives the load test (the in-process
scheduler, a server over HTTP) drives the search, so it is engine-agnostic.

Here: the search and its result. A probe is judged in capacity_judge, the levels are walked in
capacity_axis's Axis, and the runs' margins become a capacity in capacity_fit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Sequence

import numpy as np

from selector.config import LoadConfig
from selector.errors import ConfigError
from selector.measure.load_driver import LevelOutcome, parse_slo_key
from selector.measure.capacity_axis import Axis, requests_per_step
from selector.measure.capacity_fit import combine, completed_at_most, crossing, interval
from selector.measure.capacity_judge import FLOOR, judge, percentile_limits
from selector.measure.steady import judged
from selector.records import CapacityConfirmation, CapacityResult, CapacityStep

ProbeAt = Callable[[float, int], Awaitable[LevelOutcome]]  # (level, run) -> that probe, measured
RunFor = Callable[[float, float], Awaitable[LevelOutcome]]  # (rate, seconds) -> an open-loop run, measured
RUN_PROBES = 4  # probes a repeat run may spend finding its crossing


def check_capacity(cfg: LoadConfig) -> None:
    """Before anything loads: a capacity search needs at least one percentile limit, and a probe's
    judged window at least as long as the warm-up before it."""
    if cfg.capacity and not percentile_limits(cfg.slo):
        raise ConfigError("measure.load.slo", field="",
                          problem="measure.load.capacity=true needs a percentile limit to search against, "
                                  "e.g. measure.load.slo.e2e_ms_p95=4000 (per-request limits such as e2e_ms "
                                  "count toward goodput only)")
    if cfg.capacity and cfg.capacity_probe_s < cfg.capacity_warmup_s:
        raise ConfigError("measure.load", field="capacity_probe_s",
                          problem=f"a probe's judged window ({cfg.capacity_probe_s:g} s) is shorter than the warm-up "
                                  f"before it (capacity_warmup_s={cfg.capacity_warmup_s:g} s): most of what it sends "
                                  "would not be judged; lengthen capacity_probe_s or shorten capacity_warmup_s")


async def search_capacity(probe: ProbeAt, cfg: LoadConfig, on: str = "rate") -> CapacityResult:
    """Locate, repeat, combine; see the module's docstring."""
    limits = percentile_limits(cfg.slo)
    axis = Axis.of(cfg, on)
    started = time.perf_counter()
    steps: list[CapacityStep] = []

    async def passes(level: float, run: int) -> bool:
        outcome = await probe(level, run)
        margin, checks = judge(outcome.traces, limits, cfg.capacity_warmup_s)
        if outcome.stopped:  # cut off as over-saturated: its backlog grew, whatever its window shows
            margin = math.inf
        where = {"concurrency": int(level)} if axis.whole else {"rate_rps": level}
        steps.append(CapacityStep(**where, repeat=run, passed=margin <= 0, level=outcome.level, checks=checks,
                                  margin=None if margin == math.inf else max(margin, FLOOR), stopped=outcome.stopped))
        return margin <= 0

    low, high = await _locate(passes, axis, cfg.capacity_max_steps)
    crossings = [crossing(_points(steps, 0), axis)] if low is not None and high is not None else []
    censored = []
    for run in range(1, cfg.capacity_repeats if crossings else 1):
        centre = axis.snap(math.exp(float(np.mean(np.log(crossings)))))
        end = await _repeat(passes, axis, centre, run)
        crossings.append(crossing(_points(steps, run), axis))
        if end is not None:
            censored.append(f"run {run} did not cross the SLO within {RUN_PROBES} probes; its crossing is "
                            f"taken at {end:.3g}")
    return _result(cfg, axis, steps, low, high, crossings, censored, time.perf_counter() - started)


async def confirm(run_for: RunFor, result: CapacityResult, cfg: LoadConfig) -> CapacityConfirmation | None:
    """The plan, tried: an open-loop run at the rate the plan uses (the lower bound's, else the
    estimate's) for capacity_warmup_s + confirm_s, judged like a probe. None: confirm_s is 0 or
    there is no rate to plan on."""
    rate = result.planning_rps
    if not cfg.confirm_s or not rate:
        return None
    outcome = await run_for(rate, cfg.capacity_warmup_s + cfg.confirm_s)
    margin, checks = judge(outcome.traces, percentile_limits(cfg.slo), cfg.capacity_warmup_s)
    failed = [t for t in outcome.traces if not t.ok]
    notes = [f"{len(failed)} of {len(outcome.traces)} requests failed; the first: {failed[0].error}"] if failed else []
    if outcome.stopped and not any(outcome.stopped in n for n in notes):
        notes.append(outcome.stopped)
    return CapacityConfirmation(
        rate_rps=rate, window_s=cfg.confirm_s, warmup_s=cfg.capacity_warmup_s, held=margin <= 0,
        margin=None if margin == math.inf else max(margin, FLOOR), checks=checks, level=outcome.level,
        judged_requests=len(judged(outcome.traces, cfg.capacity_warmup_s)), stopped=outcome.stopped,
        note="; ".join(notes))


async def _locate(passes: Callable[[float, int], Awaitable[bool]], axis: Axis, max_steps: int
                  ) -> tuple[float | None, float | None]:
    """Run 0: bracket by doubling or halving, then bisect. (highest pass, lowest fail); None: none."""
    probes = 0

    async def ok(level: float) -> bool:
        nonlocal probes
        probes += 1
        return await passes(level, 0)

    low: float | None = None
    high: float | None = None
    level = axis.start
    if await ok(level):
        low = level
        while probes < max_steps and level < axis.maximum:
            level = min(level * 2, axis.maximum)
            if not await ok(level):
                high = level
                break
            low = level
    else:
        high = level
        while probes < max_steps and level > axis.minimum:
            level = axis.snap(max(level // 2 if axis.whole else level / 2, axis.minimum))
            if await ok(level):
                low = level
                break
            high = level
    while low is not None and high is not None and not axis.narrow(low, high) and probes < max_steps:
        mid = axis.mid(low, high)
        if await ok(mid):
            low = mid
        else:
            high = mid
    return low, high


async def _repeat(passes: Callable[[float, int], Awaitable[bool]], axis: Axis, centre: float, run: int
                  ) -> float | None:
    """One repeat run: a probe at `centre`, then further away until the SLO flips. Returns the last
    level probed when it never flipped (the run's crossing is censored there), else None."""
    first = await passes(centre, run)
    level = centre
    for k in range(RUN_PROBES - 1):
        nxt = axis.away(centre, k, up=first)
        if nxt == level:  # at the lowest level there is
            return level
        level = nxt
        if await passes(level, run) != first:
            return None
    return level


def _points(steps: Sequence[CapacityStep], run: int) -> list[tuple[float, float]]:
    return [(s.at, math.inf if s.margin is None else s.margin) for s in steps if s.repeat == run]


def _served_at(steps: Sequence[CapacityStep], level: float) -> float:
    """Requests/s served at a concurrency, interpolated between the levels probed (mean over runs)."""
    by_level: dict[float, list[float]] = {}
    for s in steps:
        by_level.setdefault(s.at, []).append(s.level.request_throughput)
    levels = sorted(by_level)
    return float(np.interp(level, levels, [float(np.mean(by_level[x])) for x in levels]))


def _per_request(steps: Sequence[CapacityStep], per_s: Callable[[CapacityStep], float | None]) -> float | None:
    """Tokens per successful request over every probe: sum(tokens) / sum(requests)."""
    tokens = requests = 0.0
    for s in steps:
        rate = per_s(s)
        if rate is None:
            return None
        tokens += rate * s.level.duration_s
        requests += s.level.request_throughput * s.level.duration_s
    return tokens / requests if requests > 0 else None


def _result(cfg: LoadConfig, axis: Axis, steps: list[CapacityStep], low: float | None, high: float | None,
            runs: list[float], censored: list[str], wall_s: float) -> CapacityResult:
    shown = ", ".join(f"{k} <= {v:g} ms" for k, v in cfg.slo.items() if parse_slo_key(k)[1] is not None)
    unit = "req/s" if axis.on == "rate" else "in flight"
    within = combine(steps)
    straddles = sorted({s.at for s in steps if s.passed} & {s.at for s in steps if not s.passed})
    failing = [x for x, ok in within.items() if not ok]
    notes: list[str] = []
    estimate = lower = upper = None
    if low is None:  # even the lowest level broke the SLO: report that level's figures
        at = min(steps, key=lambda s: s.at)
        notes.append(f"even the lowest {axis.on} probed, {at.at:g} {unit}, breaks the SLO ({shown}); "
                     "its figures are reported")
    elif high is None and low >= axis.maximum:
        estimate = low
        notes.append(f"all {low:g} requests of a probe in flight at once met the SLO: the capacity is at least "
                     f"{low:g} in flight (raise measure.load.requests_per_level to probe higher)")
    elif high is None:
        estimate = low
        notes.append(f"no {axis.on} probed broke the SLO (up to {low:g} {unit}, capacity_max_steps="
                     f"{cfg.capacity_max_steps}): the capacity is at least this")
    else:
        estimate, lower, upper = interval(runs, cfg.capacity_confidence)
        ceiling = completed_at_most(steps) if axis.on == "rate" else math.inf
        if estimate > ceiling:
            notes.append(f"the runs' crossings put the capacity above the most any probe saw the server complete, "
                         f"{ceiling:.3g} req/s: held there")
        estimate, lower, upper = (None if x is None else min(x, ceiling) for x in (estimate, lower, upper))
        if not axis.narrow(low, high):
            notes.append(f"run 0 stopped at capacity_max_steps={cfg.capacity_max_steps} with the bracket "
                         f"[{low:g}, {high:g}] {unit} wider than the tolerance")
        if len(runs) == 1:
            notes.append("one run (capacity_repeats=1): no interval")
    if straddles and estimate is not None and high is not None:
        shown_levels = ", ".join(f"{x:g}" for x in straddles)
        notes.append(f"runs disagree at {shown_levels} {unit}: the capacity straddles the SLO there, plan on the "
                     "lower bound" if lower is not None else f"runs disagree at {shown_levels} {unit}")
    notes += censored
    saturated = sum(1 for s in steps if s.stopped)
    if saturated:
        notes.append(f"{saturated} probe{'s' if saturated > 1 else ''} ended early, over-saturated")
    # The figures at capacity: the highest level the combined runs put within the SLO (else the lowest probed).
    held = [x for x, ok in within.items() if ok]
    level_at = max(held) if held else min(within)
    at = next(s for s in steps if s.at == level_at)
    capacity_rps, low_rps = (estimate, lower) if axis.on == "rate" else (
        _served_at(steps, estimate) if estimate is not None else None,
        _served_at(steps, lower) if lower is not None else None)
    return CapacityResult(
        slo=dict(cfg.slo), confidence=cfg.capacity_confidence, tolerance=cfg.capacity_tolerance,
        requests_per_step=requests_per_step(cfg), probe_s=cfg.capacity_probe_s, warmup_s=cfg.capacity_warmup_s,
        on=axis.on, capacity_rps=capacity_rps,
        failed_rps=min(failing) if failing and axis.on == "rate" else None,
        capacity_concurrency=estimate if axis.on == "concurrency" else None,
        failed_concurrency=int(min(failing)) if failing and axis.on == "concurrency" else None,
        repeats=len(runs) or 1, low=lower, high=upper, low_rps=low_rps, runs=runs, straddles=straddles,
        output_tokens_per_s=at.level.output_tokens_per_s,
        input_tokens_per_request=_per_request(steps, lambda s: s.level.input_tokens_per_s),
        output_tokens_per_request=_per_request(steps, lambda s: s.level.output_tokens_per_s),
        cpu_util_pct=at.level.cpu_util_pct, gpu_util_pct=at.level.gpu_util_pct, steps=steps, wall_s=wall_s,
        note="; ".join(notes),
    )
