"""The capacity search (selector.measure.capacity): SLO keys, percentile bounds, step sizes, and the
search converging on an engine with a known service time: a first-come-first-served engine that
takes a fixed time per token, driven open-loop by the real load driver. Its capacity under the
search's own procedure (same seeded arrivals, same bound) follows from queueing arithmetic."""

from __future__ import annotations

import asyncio
import math
import time

import numpy as np
import pytest

from selector.compose import compose
from selector.config import LoadConfig
from selector.engines.base import GenerationRequest
from selector.engines.trace import RequestTrace
from selector.errors import ConfigError
from selector.measure.capacity import (
    check_capacity,
    judge,
    percentile_limits,
    requests_per_step,
    upper_bound,
)
from selector.measure.traffic import capacity, check_slo, poisson_arrivals
from selector.measure.load_driver import Probe
from selector.measure.utilization import UtilizationMonitor, own_process


def test_slo_keys_are_per_request_limits_or_percentiles_of_measured_figures() -> None:
    check_slo({"e2e_ms": 4000, "e2e_ms_p95": 4000, "ttft_ms_p99": 500, "itl_ms_p50": 50, "queue_ms_p90": 10})
    assert percentile_limits({"e2e_ms": 1, "ttft_ms_p99.9": 2}) == {"ttft_ms_p99.9": ("ttft_ms", 99.9, 2.0)}
    for key in ("e2e_p95", "tpot_ms_p95", "e2e_ms_p100", "e2e_ms_p0", "e2e_ms_95", "throughput_p95"):
        with pytest.raises(ConfigError, match=f"field '{key}' not a measured figure nor a percentile"):
            check_slo({key: 100})
    with pytest.raises(ConfigError, match="positive number of ms"):
        check_slo({"e2e_ms_p95": 0})


def test_capacity_needs_a_percentile_limit() -> None:
    check_capacity(LoadConfig(capacity=False))
    check_capacity(LoadConfig(capacity=True, slo={"e2e_ms_p95": 1000}))
    with pytest.raises(ConfigError, match="needs a percentile limit"):
        check_capacity(LoadConfig(capacity=True, slo={"e2e_ms": 1000}))


def test_slo_maps_take_new_keys_without_plus() -> None:
    cfg = compose(["measure=load-quick", "measure.load.slo.e2e_ms_p95=4000", "measure.load.slo.ttft_ms=500",
                   "measure.load.capacity=true", "policy.traffic_rps=20", "policy.cost_per_hour=2.5"])
    assert cfg.measure.load.slo == {"e2e_ms_p95": 4000, "ttft_ms": 500}
    assert cfg.measure.load.capacity and cfg.policy.traffic_rps == 20 and cfg.policy.cost_per_hour == 2.5
    with pytest.raises(Exception, match="capacity_tolerance"):
        compose(["measure.load.capacity_tolerance=1.5"])


def test_steps_are_long_enough_for_their_percentile() -> None:
    assert requests_per_step(LoadConfig(slo={"e2e_ms_p95": 1}, requests_per_level=8)) == 59  # 1 - 0.95^59 >= 0.95
    assert requests_per_step(LoadConfig(slo={"e2e_ms_p99": 1, "ttft_ms_p50": 1}, requests_per_level=8)) == 299
    assert requests_per_step(LoadConfig(slo={"e2e_ms_p50": 1}, requests_per_level=32)) == 32
    assert requests_per_step(LoadConfig(slo={"e2e_ms_p90": 1}, capacity_confidence=0.9, requests_per_level=1)) == 22


def test_upper_bound_is_an_order_statistic_with_the_stated_coverage() -> None:
    values = list(range(1, 101))  # 100 samples
    assert upper_bound(values[:58], 95, 0.95) is None  # too few to bound p95 at 95%
    assert upper_bound(values[:59], 95, 0.95) == 59  # the largest
    k = upper_bound(values, 95, 0.95)
    assert k is not None and 95 < k <= 100
    # Coverage, checked by simulation: the bound lies above the true p95 in >= 95% of samples.
    rng = np.random.default_rng(0)
    true_p95 = -math.log(0.05)  # of Exp(1)
    bounds = [upper_bound(list(rng.exponential(size=80)), 95, 0.95) for _ in range(2000)]
    hits = [b is not None and b >= true_p95 for b in bounds]
    assert np.mean(hits) >= 0.94


def test_a_failed_request_counts_as_infinitely_slow() -> None:
    ok = [RequestTrace(sent=0.0, end=0.1, token_times=[0.05, 0.1], output_tokens=2) for _ in range(30)]
    passed, checks = judge(ok, {"e2e_ms_p90": ("e2e_ms", 90, 150.0)}, 0.9)
    assert passed and checks["e2e_ms_p90"]["estimate"] == pytest.approx(100) and checks["e2e_ms_p90"]["upper"]
    failed = ok[:25] + [RequestTrace(sent=0.0, end=0.1, error="HTTP 500")] * 5
    passed, checks = judge(failed, {"e2e_ms_p90": ("e2e_ms", 90, 150.0)}, 0.9)
    assert not passed and checks["e2e_ms_p90"]["upper"] is None  # infinite: shown as no figure
    passed, checks = judge(ok, {"queue_ms_p90": ("queue_ms", 90, 1.0)}, 0.9)  # no request has a queue figure
    assert passed and checks["queue_ms_p90"]["estimate"] is None


# ---- the search on an engine with a known service time -----------------------------------------
class FifoEngine:
    """One request at a time, first come first served, `tokens` tokens of `per_token_s` each."""

    def __init__(self, per_token_s: float, tokens: int) -> None:
        self.per_token_s, self.tokens = per_token_s, tokens
        self.lock: asyncio.Lock | None = None

    async def __call__(self, request: GenerationRequest) -> RequestTrace:
        self.lock = self.lock or asyncio.Lock()
        trace = RequestTrace(sent=time.perf_counter(), output_tokens=self.tokens)
        async with self.lock:
            for _ in range(self.tokens):
                await asyncio.sleep(self.per_token_s)
                trace.token_times.append(time.perf_counter())
        trace.end = time.perf_counter()
        return trace


def fifo_sojourns_ms(rate: float, n: int, seed: int, service_s: float) -> list[float]:
    """Queueing arithmetic: each request's time in a FIFO single server with a fixed service time."""
    free, out = 0.0, []
    for t in poisson_arrivals(n, rate, seed):
        free = max(t, free) + service_s
        out.append((free - t) * 1e3)
    return out


def expected_capacity(cfg: LoadConfig, service_s: float) -> float:
    """The rate where the search's own test (same arrivals, same bound) turns from pass to fail;
    monotone in the rate because the arrivals only scale."""
    (key, (_, q, limit)), = percentile_limits(cfg.slo).items()
    n = requests_per_step(cfg)

    def passes(rate: float) -> bool:
        bound = upper_bound(fifo_sojourns_ms(rate, n, cfg.seed, service_s), q, cfg.capacity_confidence)
        return bound is not None and bound <= limit

    low, high = 0.01, 10 / service_s
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if passes(mid) else (low, mid)
    return low


def run_search(engine: FifoEngine, cfg: LoadConfig):  # type: ignore[no-untyped-def]
    requests = [GenerationRequest("x", engine.tokens)] * requests_per_step(cfg)
    monitor = lambda: UtilizationMonitor(own_process, time.thread_time, [], subtract_harness=True)  # noqa: E731
    return asyncio.run(capacity(Probe(engine, cfg, monitor), requests, warmup=requests[:1]))


def test_the_search_converges_on_the_capacity_of_a_known_service_time() -> None:
    engine = FifoEngine(per_token_s=0.01, tokens=4)  # 40 ms a request: at most 25 req/s
    cfg = LoadConfig(slo={"e2e_ms_p80": 120}, capacity_confidence=0.8, requests_per_level=40,
                     capacity_start_rps=4.0, capacity_tolerance=0.1, capacity_max_steps=12, max_duration_s=30)
    result = run_search(engine, cfg)
    rates = [s.rate_rps for s in result.steps]
    # bracketing by doubling from 4 req/s until a step fails, then bisection of the bracket
    first_fail = next(i for i, s in enumerate(result.steps) if not s.passed)
    assert rates[: first_fail + 1] == [4.0 * 2**i for i in range(first_fail + 1)] and first_fail >= 2
    low, high = rates[first_fail - 1], rates[first_fail]
    for step in result.steps[first_fail + 1 :]:
        assert step.rate_rps == (low + high) / 2
        low, high = (step.rate_rps, high) if step.passed else (low, step.rate_rps)
    assert result.capacity_rps is not None and result.failed_rps is not None
    assert (result.failed_rps - result.capacity_rps) / result.capacity_rps <= 0.1 and not result.note
    assert all(s.level.requests == 40 for s in result.steps) and result.requests_per_step == 40
    passed = [s.rate_rps for s in result.steps if s.passed]
    failed = [s.rate_rps for s in result.steps if not s.passed]
    assert max(passed) == result.capacity_rps < min(failed) == result.failed_rps
    # The service time the engine delivered (asyncio sleeps overshoot, more on a busy machine): the
    # fastest and the median request at the lowest rate, where nothing queues.
    lowest = min(result.steps, key=lambda s: s.rate_rps).level.e2e_ms
    assert lowest is not None and 40 <= lowest.p50 < 60
    fast, typical = expected_capacity(cfg, lowest.p50 / 1e3 * 0.98), expected_capacity(cfg, lowest.p50 / 1e3 * 1.05)
    assert typical < 1 / 0.04  # the SLO binds below saturation
    # Timing on a shared machine moves between steps (CI measured 18 req/s where the lowest step's
    # service time predicted 13), so the queueing arithmetic bounds it loosely: above half of what it
    # predicts, below the rate that saturates the nominal 40 ms service. The procedure itself is
    # checked exactly above; its accuracy on a quiet machine belongs in benchmarks/.
    assert 0.5 * typical <= result.capacity_rps < 1 / 0.04, (typical, fast, rates)
    assert result.output_tokens_per_s == pytest.approx(
        next(s for s in result.steps if s.rate_rps == result.capacity_rps).level.output_tokens_per_s)
    assert result.wall_s > 0


def test_when_the_lowest_rate_already_breaks_the_slo_it_says_so_with_that_rates_figures() -> None:
    engine = FifoEngine(per_token_s=0.01, tokens=4)  # 40 ms a request, and the limit is 20 ms
    cfg = LoadConfig(slo={"e2e_ms_p50": 20}, capacity_confidence=0.5, requests_per_level=6,
                     capacity_start_rps=8.0, capacity_min_rps=2.0, max_duration_s=30)
    result = run_search(engine, cfg)
    assert [s.rate_rps for s in result.steps] == [8.0, 4.0, 2.0] and not any(s.passed for s in result.steps)
    assert result.capacity_rps is None and result.failed_rps == 2.0
    assert "even the lowest rate probed, 2 req/s, breaks the SLO (e2e_ms_p50 <= 20 ms)" in result.note
    lowest = result.steps[-1].level
    assert lowest.requests == 6 and lowest.e2e_ms is not None and lowest.e2e_ms.p50 >= 40
    assert result.output_tokens_per_s == pytest.approx(lowest.output_tokens_per_s) and result.output_tokens_per_s > 0
