"""Capacity at the SLO: the highest open-loop arrival rate (capacity_on=rate) or closed-loop
concurrency (capacity_on=concurrency) whose requests meet measure.load.slo's percentile limits
(e.g. e2e_ms_p95: 4000), with a confidence interval from repeated runs; found per variant on its
warm engine or server.

The method (docs/load-testing.md, "Capacity at the SLO"):
- a probe is one run of one level: n requests, n large enough that the largest of n samples would
  bound each limited percentile at capacity_confidence (59 for p95 at 0.95). Its margin is
  log(estimate / limit) for the limit it misses most (a failed or cut-off request counts as
  infinitely slow); it is within the SLO when the margin is <= 0;
- run 0 locates the boundary: from the start level, double while probes pass, or halve while they
  fail, then bisect until the bracket is within capacity_tolerance of its low end (a concurrency:
  or one request apart), at most capacity_max_steps probes;
- runs 1 .. capacity_repeats-1 each find their own crossing: a probe at the current estimate, then
  probes ever further away (by (1 + 2 tolerance)^1, ^2, ^4) until the SLO flips, at most
  RUN_PROBES. A run's Poisson arrivals have their own seed (seed + run), the same at every rate of
  that run, so within a run rates differ only in the gaps' scale and its margins rise with the rate;
- a run's crossing: its margins made monotone in the level (isotonic regression: a level that
  failed is never passed above a level that failed again), then the level where that fit crosses 0,
  interpolated linearly in (log level, margin) between the two probes around it;
- the capacity is the geometric mean of the runs' crossings, its interval Student's t on their
  logarithms at capacity_confidence (runs are independent, so the spread between them is what a
  second run would move it by, requests inside a probe being far from independent under queueing);
- all runs' probes of one level, combined (mean margin, made monotone over the levels), say which
  levels the report calls within the SLO; a level where runs disagree makes the capacity straddle
  the SLO, and the result says so.

The search only calls `probe(level, run)`: whatever drives the load test (the in-process
scheduler, a server over HTTP) drives the search, so it is engine-agnostic.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import isotonic_regression
from scipy.stats import t as student_t

from selector.config import LoadConfig
from selector.engines.trace import RequestTrace
from selector.errors import ConfigError
from selector.measure.load_driver import LevelOutcome, parse_slo_key
from selector.records import CapacityResult, CapacityStep

ProbeAt = Callable[[float, int], Awaitable[LevelOutcome]]  # (level, run) -> that probe, measured
RUN_PROBES = 4  # probes a repeat run may spend finding its crossing
CLIP = 10.0  # margins are clipped to +-this (log units) before fitting: an infinite one is "far over"


def percentile_limits(slo: dict[str, float]) -> dict[str, tuple[str, float, float]]:
    """slo key -> (figure, percentile, limit ms) for the keys that are percentiles."""
    out = {}
    for key, limit in slo.items():
        metric, q = parse_slo_key(key)
        if q is not None:
            out[key] = (metric, q, float(limit))
    return out


def check_capacity(cfg: LoadConfig) -> None:
    """Before anything loads: a capacity search needs at least one percentile limit."""
    if cfg.capacity and not percentile_limits(cfg.slo):
        raise ConfigError("measure.load.slo", field="",
                          problem="measure.load.capacity=true needs a percentile limit to search against, "
                                  "e.g. measure.load.slo.e2e_ms_p95=4000 (per-request limits such as e2e_ms "
                                  "count toward goodput only)")


def searched_axes(cfg: LoadConfig) -> list[str]:
    """"rate", "concurrency" or both, in that order (measure.load.capacity_on)."""
    return ["rate", "concurrency"] if cfg.capacity_on == "both" else [cfg.capacity_on]


def requests_per_step(cfg: LoadConfig) -> int:
    """Enough requests that the largest would bound every percentile at the confidence, and at
    least requests_per_level."""
    needed = [math.ceil(math.log(1 - cfg.capacity_confidence) / math.log(q / 100))
              for _, q, _ in percentile_limits(cfg.slo).values()]
    return max([cfg.requests_per_level, *needed])


def figure(trace: RequestTrace, metric: str) -> float | None:
    """A request's value of a figure; the inter-token figure per request is its mean gap (the
    gaps inside one request are not independent samples)."""
    if not trace.ok:
        return math.inf
    return {"ttft_ms": trace.ttft_ms, "itl_ms": trace.itl_mean_ms, "e2e_ms": trace.e2e_ms,
            "queue_ms": trace.queue_ms}[metric]


def judge(traces: Sequence[RequestTrace], limits: dict[str, tuple[str, float, float]]
          ) -> tuple[float, dict[str, dict[str, float | None]]]:
    """A probe's margin (log(estimate / limit) of the limit it misses most; -inf when no request
    carried any limited figure, +inf when the percentile fell on a failed request) and per limit
    its estimate and limit. A figure no request carried (queue time from a server that hides it)
    is not held against the probe."""
    margin, checks = -math.inf, {}
    for key, (metric, q, limit) in limits.items():
        values = [v for t in traces if (v := figure(t, metric)) is not None]
        if not values:
            checks[key] = {"estimate": None, "limit": limit}
            continue
        estimate = float(np.percentile(values, q, method="inverted_cdf"))
        checks[key] = {"estimate": estimate if math.isfinite(estimate) else None, "limit": limit}
        margin = max(margin, math.log(max(estimate, 1e-9) / limit) if math.isfinite(estimate) else math.inf)
    return margin, checks


@dataclass(frozen=True)
class Axis:
    """What is searched: a rate (any positive number) or a concurrency (whole numbers from 1)."""

    on: str
    start: float
    minimum: float
    tolerance: float
    maximum: float = math.inf  # a concurrency above a probe's request count is the same burst

    @classmethod
    def of(cls, cfg: LoadConfig, on: str) -> Axis:
        if on == "concurrency":
            return cls(on, float(cfg.capacity_start_concurrency), 1.0, cfg.capacity_tolerance,
                       float(requests_per_step(cfg)))
        return cls(on, max(cfg.capacity_start_rps, cfg.capacity_min_rps), cfg.capacity_min_rps, cfg.capacity_tolerance)

    @property
    def whole(self) -> bool:
        return self.on == "concurrency"

    def snap(self, x: float) -> float:
        return min(self.maximum, max(self.minimum, float(round(x)) if self.whole else x))

    def mid(self, low: float, high: float) -> float:
        return float((low + high) // 2) if self.whole else (low + high) / 2

    def narrow(self, low: float, high: float) -> bool:
        """Bisection may stop: within the tolerance of its low end (a concurrency: or one apart)."""
        return high - low <= max(1.0 if self.whole else 0.0, self.tolerance * low)

    def away(self, centre: float, k: int, up: bool) -> float:
        """The k-th level (from 0) a repeat run tries on its way from `centre` to its crossing."""
        factor = (1 + 2 * self.tolerance) ** (2**k)
        if self.whole:
            step = max(2**k, round(centre * (factor - 1)))
            return self.snap(centre + step if up else centre - step)
        return self.snap(centre * factor if up else centre / factor)


async def search_capacity(probe: ProbeAt, cfg: LoadConfig, on: str = "rate") -> CapacityResult:
    """Locate, repeat, combine; see the module's docstring."""
    limits = percentile_limits(cfg.slo)
    axis = Axis.of(cfg, on)
    started = time.perf_counter()
    steps: list[CapacityStep] = []

    async def passes(level: float, run: int) -> bool:
        outcome = await probe(level, run)
        margin, checks = judge(outcome.traces, limits)
        where = {"concurrency": int(level)} if axis.whole else {"rate_rps": level}
        steps.append(CapacityStep(**where, repeat=run, passed=margin <= 0, level=outcome.level, checks=checks,
                                  margin=None if margin == math.inf else max(margin, -CLIP), stopped=outcome.stopped))
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


def monotone(levels: Sequence[float], margins: Sequence[float], weights: Sequence[float] | None = None
             ) -> np.ndarray:
    """Margins made non-decreasing in the level (isotonic regression), clipped to +-CLIP first."""
    y = np.clip(np.asarray(margins, dtype=float), -CLIP, CLIP)
    order = np.argsort(levels, kind="stable")
    fit = np.empty_like(y)
    fit[order] = isotonic_regression(y[order], weights=None if weights is None else np.asarray(weights)[order]).x
    return fit


def crossing(points: Sequence[tuple[float, float]], axis: Axis) -> float:
    """Where one run's monotone fit of margin against level crosses 0: interpolated linearly in
    (log level, margin) between the two probes around it (their geometric mean when the upper
    one's margin is infinite); the lowest level when even that failed, the highest when none did."""
    by_level: dict[float, list[float]] = {}
    for level, margin in points:
        by_level.setdefault(level, []).append(min(max(margin, -CLIP), CLIP))
    levels = sorted(by_level)
    fit = monotone(levels, [float(np.mean(by_level[x])) for x in levels], [len(by_level[x]) for x in levels])
    above = [i for i, m in enumerate(fit) if m > 0]
    if not above:
        return levels[-1]
    i = above[0]
    if i == 0:
        return levels[0]
    lo, hi, m0, m1 = levels[i - 1], levels[i], fit[i - 1], fit[i]
    if m1 >= CLIP:
        return math.sqrt(lo * hi)
    share = (0.0 - m0) / (m1 - m0)
    return math.exp(math.log(lo) + share * (math.log(hi) - math.log(lo)))


def interval(runs: Sequence[float], confidence: float) -> tuple[float, float | None, float | None]:
    """(geometric mean, low, high): Student's t on the logs of the runs' crossings; no interval from one run."""
    logs = np.log(np.asarray(runs, dtype=float))
    centre = float(logs.mean())
    if len(logs) < 2:
        return math.exp(centre), None, None
    half = float(student_t.ppf(0.5 + confidence / 2, len(logs) - 1)) * float(logs.std(ddof=1)) / math.sqrt(len(logs))
    return math.exp(centre), math.exp(centre - half), math.exp(centre + half)


def combine(steps: Sequence[CapacityStep]) -> dict[float, bool]:
    """Every run's probes of a level, combined: level -> within the SLO, from the mean margin per
    level made monotone over the levels (weighted by its probes). Also sets each step's within_fit."""
    by_level: dict[float, list[float]] = {}
    for s in steps:
        by_level.setdefault(s.at, []).append(CLIP if s.margin is None else s.margin)
    levels = sorted(by_level)
    fit = monotone(levels, [float(np.mean(by_level[x])) for x in levels], [len(by_level[x]) for x in levels])
    within = {x: bool(m <= 0) for x, m in zip(levels, fit)}
    for s in steps:
        s.within_fit = within[s.at]
    return within


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
        requests_per_step=requests_per_step(cfg), on=axis.on, capacity_rps=capacity_rps,
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
