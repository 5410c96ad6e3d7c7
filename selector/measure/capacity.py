"""Capacity at the SLO: the highest open-loop arrival rate whose requests meet measure.load.slo's
percentile limits (e.g. e2e_ms_p95: 4000), found per variant on its warm engine or server.

The search (docs/load-testing.md):
- a step is a Poisson level at one rate, of n requests, where n is large enough that the largest
  of n samples bounds the percentile from above at the stated confidence: 1 - q^n >= confidence
  (59 requests for p95 at 95%, 299 for p99). Same seed at every rate (common random numbers: the
  rates differ only in the gaps' scale), so neighbouring steps compare like for like;
- a step passes when, for every limit, the distribution-free upper confidence bound of that
  percentile (an order statistic, from the binomial distribution) is within the limit. A failed
  or cut-off request counts as infinitely slow;
- bracketing: from capacity_start_rps, double while steps pass, or halve while they fail down to
  capacity_min_rps; then bisection until (high - low) / low <= capacity_tolerance, or
  capacity_max_steps. The capacity is the highest rate that passed.
If even the lowest rate fails, the result says so and carries that step's figures.

The search only calls `probe(rate)`: whatever drives the load test (the in-process scheduler, a
server over HTTP) drives the search, so it is engine-agnostic.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Sequence

import numpy as np
from scipy.stats import binom

from selector.config import LoadConfig
from selector.engines.trace import RequestTrace
from selector.errors import ConfigError
from selector.measure.load_driver import LevelOutcome, parse_slo_key
from selector.records import CapacityResult, CapacityStep

ProbeAt = Callable[[float], Awaitable[LevelOutcome]]  # a rate -> that step, measured


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


def requests_per_step(cfg: LoadConfig) -> int:
    """Enough requests that the largest bounds every percentile at the confidence, and at least
    requests_per_level."""
    needed = [math.ceil(math.log(1 - cfg.capacity_confidence) / math.log(q / 100))
              for _, q, _ in percentile_limits(cfg.slo).values()]
    return max([cfg.requests_per_level, *needed])


def upper_bound(values: Sequence[float], q: float, confidence: float) -> float | None:
    """Distribution-free upper confidence bound of the q-th percentile: the k-th smallest value,
    k the least with P(Binomial(n, q) <= k - 1) >= confidence. None: n too small for any bound."""
    n = len(values)
    if n == 0:
        return None
    k = int(binom.ppf(confidence, n, q / 100)) + 1
    return float(np.sort(values)[k - 1]) if k <= n else None


def figure(trace: RequestTrace, metric: str) -> float | None:
    """A request's value of a figure; the inter-token figure per request is its mean gap (the
    gaps inside one request are not independent samples)."""
    if not trace.ok:
        return math.inf
    return {"ttft_ms": trace.ttft_ms, "itl_ms": trace.itl_mean_ms, "e2e_ms": trace.e2e_ms,
            "queue_ms": trace.queue_ms}[metric]


def judge(traces: Sequence[RequestTrace], limits: dict[str, tuple[str, float, float]],
          confidence: float) -> tuple[bool, dict[str, dict[str, float | None]]]:
    """Whether a step met every limit, and per limit its estimate, upper bound and limit. A figure
    no request carried (queue time from a server that hides it) is not held against the step."""
    passed, checks = True, {}
    for key, (metric, q, limit) in limits.items():
        values = [v for t in traces if (v := figure(t, metric)) is not None]
        if not values:
            checks[key] = {"estimate": None, "upper": None, "limit": limit}
            continue
        estimate = float(np.percentile(values, q, method="inverted_cdf"))
        upper = upper_bound(values, q, confidence)
        checks[key] = {"estimate": _finite(estimate), "upper": _finite(upper), "limit": limit}
        passed &= upper is not None and upper <= limit
    return passed, checks


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


async def search_capacity(probe: ProbeAt, cfg: LoadConfig) -> CapacityResult:
    """Bracket, then bisect; see the module's docstring."""
    limits = percentile_limits(cfg.slo)
    started = time.perf_counter()
    steps: list[CapacityStep] = []

    async def passes(rate: float) -> bool:
        outcome = await probe(rate)
        ok, checks = judge(outcome.traces, limits, cfg.capacity_confidence)
        steps.append(CapacityStep(rate_rps=rate, passed=ok, level=outcome.level, checks=checks))
        return ok

    def room() -> bool:
        return len(steps) < cfg.capacity_max_steps

    low: float | None = None
    high: float | None = None
    rate = max(cfg.capacity_start_rps, cfg.capacity_min_rps)
    if await passes(rate):
        low = rate
        while room():
            rate *= 2
            if not await passes(rate):
                high = rate
                break
            low = rate
    else:
        high = rate
        while room() and rate > cfg.capacity_min_rps:
            rate = max(rate / 2, cfg.capacity_min_rps)
            if await passes(rate):
                low = rate
                break
            high = rate
    while low is not None and high is not None and (high - low) / low > cfg.capacity_tolerance and room():
        mid = (low + high) / 2
        if await passes(mid):
            low = mid
        else:
            high = mid
    return _result(cfg, steps, low, high, time.perf_counter() - started)


def _result(cfg: LoadConfig, steps: list[CapacityStep], low: float | None, high: float | None,
            wall_s: float) -> CapacityResult:
    shown = ", ".join(f"{k} <= {v:g} ms" for k, v in cfg.slo.items() if parse_slo_key(k)[1] is not None)
    if low is None:  # even the lowest rate broke the SLO: report that rate's figures
        at = min(steps, key=lambda s: s.rate_rps)
        note = (f"even the lowest rate probed, {at.rate_rps:g} req/s, breaks the SLO ({shown}); "
                f"its figures are reported")
    else:
        at = next(s for s in steps if s.rate_rps == low and s.passed)
        note = "" if high is not None else (
            f"no rate probed broke the SLO (up to {low:g} req/s, capacity_max_steps={cfg.capacity_max_steps}): "
            "the capacity is at least this")
        if high is not None and (high - low) / low > cfg.capacity_tolerance:
            note = (f"stopped at capacity_max_steps={cfg.capacity_max_steps} with the bracket "
                    f"[{low:g}, {high:g}] req/s wider than the tolerance")
    return CapacityResult(
        slo=dict(cfg.slo), confidence=cfg.capacity_confidence, tolerance=cfg.capacity_tolerance,
        requests_per_step=requests_per_step(cfg), capacity_rps=low, failed_rps=high,
        output_tokens_per_s=at.level.output_tokens_per_s, cpu_util_pct=at.level.cpu_util_pct,
        gpu_util_pct=at.level.gpu_util_pct, steps=steps, wall_s=wall_s, note=note,
    )
