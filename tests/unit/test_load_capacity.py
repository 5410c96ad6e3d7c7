"""The capacity search (selector.measure.capacity): SLO keys, step sizes, margins, each run's
monotone crossing, the interval over runs, and the search on engines with a known service time:
a first-come-first-served engine driven open-loop (by rate) and closed-loop (by concurrency) by
the real load driver; the interval's coverage against a simulated queue whose capacity is known
(benchmarks.capacity_coverage, in small); and over-saturation ending a probe early."""

from __future__ import annotations

import asyncio
import math
import time

import numpy as np
import pytest
from scipy.stats import t as student_t

from selector.compose import compose
from selector.config import LoadConfig
from selector.generation import GenerationRequest
from selector.trace import RequestTrace
from selector.errors import ConfigError
from selector.measure.capacity import check_capacity
from selector.measure.capacity_axis import Axis, requests_per_step
from selector.measure.capacity_fit import combine, completed_at_most, crossing, interval, monotone
from selector.measure.capacity_judge import judge, percentile_limits
from selector.measure.steady import ProbeLength, rise
from selector.engines.spec import Channel
from selector.measure.load_driver import Probe, drive_level
from selector.measure.saturation import SaturationWatch, first_saturation
from selector.measure.traffic import capacity, check_slo, poisson_arrivals
from selector.resources.utilization import UtilizationMonitor, own_process
from selector.records import CapacityStep, LoadLevel


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


def test_capacity_keys_compose_and_bad_values_name_their_field() -> None:
    cfg = compose(["measure=load-quick", "measure.load.slo.e2e_ms_p95=4000", "measure.load.slo.ttft_ms=500",
                   "measure.load.capacity=true", "measure.load.capacity_on=both", "measure.load.capacity_repeats=3",
                   "policy.traffic_rps=20", "policy.cost_per_hour=2.5"])
    load = cfg.measure.load
    assert load.slo == {"e2e_ms_p95": 4000, "ttft_ms": 500} and load.capacity_on == "both"
    assert load.capacity_repeats == 3 and cfg.policy.traffic_rps == 20 and cfg.policy.cost_per_hour == 2.5
    assert LoadConfig().capacity_repeats == 5 and LoadConfig().capacity_on == "rate"  # the defaults
    for override, message in (("measure.load.capacity_tolerance=1.5", "capacity_tolerance"),
                              ("measure.load.capacity_repeats=0", "field 'measure.load.capacity_repeats' must be at least 1 run"),
                              ("measure.load.capacity_on=tokens", "field 'measure.load.capacity_on' must be rate, concurrency or both"),
                              ("measure.load.capacity_start_concurrency=0", "capacity_start_concurrency")):
        with pytest.raises(Exception, match=message):
            compose([override])


def test_a_probe_runs_its_warm_up_and_window_and_stretches_the_window_at_slow_rates() -> None:
    length = ProbeLength.of(LoadConfig(capacity_probe_s=20, capacity_warmup_s=5, capacity_probe_requests=100))
    assert (length.window_at(10.0), length.span_at(10.0), length.requests_at(10.0)) == (20.0, 25.0, 250)
    assert (length.window_at(2.0), length.span_at(2.0), length.requests_at(2.0)) == (50.0, 55.0, 110)
    assert requests_per_step(LoadConfig(capacity_probe_requests=100)) == 100
    # a closed loop sends until the span has passed and its window holds its fewest requests
    assert not length.closed_done([0.1 * i for i in range(200)])  # 19.9 s: too short
    assert not length.closed_done([0.0, 24.0, 26.0])  # long enough, too few after the warm-up
    assert length.closed_done([0.2 * i for i in range(131)])  # 26 s, 106 sent after 5 s


def test_a_probe_shorter_than_its_warm_up_or_a_negative_confirmation_is_refused() -> None:
    check_capacity(LoadConfig(capacity=True, slo={"e2e_ms_p95": 1000}, capacity_probe_s=5, capacity_warmup_s=5))
    with pytest.raises(ConfigError, match="field 'capacity_probe_s' a probe's judged window \\(2 s\\) is shorter "
                                          "than the warm-up before it \\(capacity_warmup_s=5 s\\)"):
        check_capacity(LoadConfig(capacity=True, slo={"e2e_ms_p95": 1000}, capacity_probe_s=2, capacity_warmup_s=5))
    for override, message in (("measure.load.confirm_s=-1", "field 'measure.load.confirm_s' must be 0 or more"),
                              ("measure.load.capacity_warmup_s=-1", "capacity_warmup_s' must be 0 or more"),
                              ("measure.load.capacity_probe_s=0", "capacity_probe_s' must be a positive")):
        with pytest.raises(Exception, match=message):
            compose([override])


def trace(ms: float) -> RequestTrace:
    return RequestTrace(sent=0.0, end=ms / 1e3, token_times=[ms / 2e3, ms / 1e3], output_tokens=2)


def test_a_probes_margin_is_the_log_of_estimate_over_limit_of_the_worst_limit() -> None:
    ok = [trace(100.0) for _ in range(30)]
    margin, checks = judge(ok, {"e2e_ms_p90": ("e2e_ms", 90, 150.0), "ttft_ms_p90": ("ttft_ms", 90, 40.0)})
    assert checks["e2e_ms_p90"] == {"estimate": pytest.approx(100), "rise": 0.0, "limit": 150.0}
    assert margin == pytest.approx(math.log(50 / 40))  # TTFT misses most
    failed = ok[:25] + [RequestTrace(sent=0.0, end=0.1, error="HTTP 500")] * 5
    margin, checks = judge(failed, {"e2e_ms_p90": ("e2e_ms", 90, 150.0)})
    assert margin == math.inf and checks["e2e_ms_p90"]["estimate"] is None  # infinite: shown as no figure
    margin, checks = judge(ok, {"queue_ms_p90": ("queue_ms", 90, 1.0)})  # no request has a queue figure
    assert margin == -math.inf and checks["queue_ms_p90"]["estimate"] is None


def test_only_the_window_after_the_warm_up_is_judged_and_a_rising_latency_counts_against_it() -> None:
    limits = {"e2e_ms_p90": ("e2e_ms", 90, 1000.0)}
    # 5 s of slow warm-up requests, then a flat 100 ms: the warm-up is not judged
    warm = [RequestTrace(sent=0.1 * i, end=0.1 * i + 5.0) for i in range(50)]
    flat = [RequestTrace(sent=5.0 + 0.1 * i, end=5.0 + 0.1 * i + 0.1) for i in range(100)]
    margin, checks = judge(warm + flat, limits, warmup_s=5.0)
    assert checks["e2e_ms_p90"]["estimate"] == pytest.approx(100) and checks["e2e_ms_p90"]["rise"] == pytest.approx(0, abs=1e-6)
    assert margin == pytest.approx(math.log(100 / 1000))
    assert judge(warm + flat, limits)[0] == pytest.approx(math.log(5000 / 1000))  # no warm-up: judged on all
    # a backlog that grows: latency rises from 100 to 600 ms across the window; its p90 (550 ms) is under
    # the limit, but with what it gained (500 ms) it is over: a steady state would not hold it
    growing = [RequestTrace(sent=0.1 * i, end=0.1 * i + 0.1 + 0.005 * i) for i in range(101)]
    margin, checks = judge(growing, limits)
    assert checks["e2e_ms_p90"]["estimate"] == pytest.approx(550) and checks["e2e_ms_p90"]["rise"] == pytest.approx(500)
    assert margin == pytest.approx(math.log(1050 / 1000)) and margin > 0
    # cut off during its warm-up: nothing was judged, and that is a failure, not a pass
    assert judge(warm, limits, warmup_s=5.0)[0] == math.inf


def test_the_rise_is_the_least_squares_slope_times_the_span_and_never_negative() -> None:
    assert rise([0.0, 1.0, 2.0, 3.0], [10.0, 12.0, 14.0, 16.0]) == pytest.approx(6.0)
    assert rise([0.0, 1.0, 2.0, 3.0], [16.0, 14.0, 12.0, 10.0]) == 0.0
    assert rise([0.0, 1.0, 2.0, 3.0], [10.0, 12.0, math.inf, 16.0]) == pytest.approx(6.0)  # a failure is left out
    assert rise([0.0, 1.0], [1.0, 5.0]) == 0.0  # too few to say


RATE = Axis("rate", 1.0, 0.05, 0.25)


def test_a_runs_crossing_is_interpolated_on_its_monotone_fit() -> None:
    # Within at 1 and 3, over at 2 and 4: the fit pools 2 and 3 (mean 0.05 > 0), so 3 is not "passed"
    # above a level that failed; the crossing lies between 1 and the pooled pair.
    points = [(1.0, -0.5), (2.0, 0.2), (3.0, -0.1), (4.0, 0.5)]
    expected = math.exp(math.log(1) + (0.5 / 0.55) * (math.log(2) - math.log(1)))
    assert crossing(points, RATE) == pytest.approx(expected)
    assert crossing([(2.0, -0.2), (4.0, 0.2)], RATE) == pytest.approx(math.sqrt(8))  # halfway in log-log
    assert crossing([(2.0, -0.2), (4.0, math.inf)], RATE) == pytest.approx(math.sqrt(8))  # infinite: the midpoint
    assert crossing([(2.0, -0.2), (4.0, -0.1)], RATE) == 4.0  # never over: the highest level
    assert crossing([(2.0, 0.2), (4.0, 0.3)], RATE) == 2.0  # over from the lowest: the lowest


def test_a_cut_off_probe_fails_every_level_above_it_whatever_stands_in_for_infinity() -> None:
    # Passed at 4, cut off at 6, passed at 9: the fit pools 6 and 9 into "over", so the crossing is the
    # geometric mean of 4 and 6 (before, the margins were clipped to +-CLIP first: 4.063 with CLIP=10,
    # 4.531 with CLIP=1)
    assert crossing([(4.0, -0.2), (6.0, math.inf), (9.0, -0.1)], RATE) == pytest.approx(math.sqrt(24))
    fit = monotone([4.0, 6.0, 9.0], [-0.2, math.inf, -0.1])
    assert fit[0] == pytest.approx(-0.2) and math.isinf(fit[1]) and math.isinf(fit[2])
    assert list(monotone([1.0, 2.0, 3.0], [-0.5, 0.2, -0.1])) == pytest.approx([-0.5, 0.05, 0.05])


def test_the_interval_is_student_t_on_the_logs_of_the_runs_crossings() -> None:
    runs = [3.0, 3.5, 2.8, 4.1, 3.3]
    logs = np.log(runs)
    half = student_t.ppf(0.975, 4) * logs.std(ddof=1) / math.sqrt(5)
    estimate, low, high = interval(runs, 0.95)
    assert estimate == pytest.approx(math.exp(logs.mean()))
    assert (low, high) == (pytest.approx(math.exp(logs.mean() - half)), pytest.approx(math.exp(logs.mean() + half)))
    assert low < estimate < high and high / low == pytest.approx(math.exp(2 * half))
    assert interval([3.0], 0.95) == (pytest.approx(3.0), None, None)


def step(rate: float, run: int, margin: float | None) -> CapacityStep:
    level = LoadLevel(rate_rps=rate, requests=10, errors=0, duration_s=1.0, request_throughput=rate,
                      output_tokens_per_s=8 * rate)
    return CapacityStep(rate_rps=rate, repeat=run, passed=margin is not None and margin <= 0, level=level,
                        margin=margin)


def test_runs_combined_monotonically_never_pass_a_level_above_one_that_failed() -> None:
    steps = [step(2.0, 0, -0.3), step(4.0, 0, 0.1), step(3.0, 0, -0.05), step(3.0, 1, 0.2), step(4.0, 1, -0.01),
             step(5.0, 1, None)]
    within = combine(steps)
    # 3: mean 0.075 over; 4: mean 0.045, pooled with 3 -> over; 5: infinite -> over
    assert within == {2.0: True, 3.0: False, 4.0: False, 5.0: False}
    assert [s.within_fit for s in steps] == [True, False, False, False, False, False]


# ---- the search on engines with a known service time ------------------------------------------
class FifoEngine:
    """One request at a time, first come first served, `tokens` tokens of `per_token_s` each."""

    def __init__(self, per_token_s: float, tokens: int) -> None:
        self.per_token_s, self.tokens = per_token_s, tokens
        self.lock: asyncio.Lock | None = None

    async def __call__(self, request: GenerationRequest) -> RequestTrace:
        self.lock = self.lock or asyncio.Lock()
        trace = RequestTrace(sent=time.perf_counter(), output_tokens=self.tokens, prompt_tokens=5)
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


def expected_capacity(cfg: LoadConfig, service_s: float, n: int = 40_000) -> float:
    """The steady-state capacity by queueing arithmetic: the rate where the percentile of one long
    run (its first tenth left out as warm-up) crosses the limit."""
    (_, q, limit), = percentile_limits(cfg.slo).values()

    def passes(rate: float) -> bool:
        sojourns = fifo_sojourns_ms(rate, n, 0, service_s)[n // 10:]
        return float(np.percentile(sojourns, q, method="inverted_cdf")) <= limit

    low, high = 0.01, 1 / service_s
    for _ in range(25):
        mid = math.sqrt(low * high)
        low, high = (mid, high) if passes(mid) else (low, mid)
    return low


def run_search(engine: FifoEngine, cfg: LoadConfig):  # type: ignore[no-untyped-def]
    requests = [GenerationRequest("x", engine.tokens)] * 4
    monitor = lambda: UtilizationMonitor(own_process, time.thread_time, [], subtract_harness=True)  # noqa: E731
    return asyncio.run(capacity(Probe(Channel(engine, monitor), cfg), requests, warmup=requests[:1]))


@pytest.mark.slow  # a timed capacity search against a FIFO engine: ~15 s alone on 2 cores
def test_the_search_by_rate_converges_on_a_known_service_time_with_an_interval() -> None:
    engine = FifoEngine(per_token_s=0.01, tokens=4)  # 40 ms a request: at most 25 req/s
    cfg = LoadConfig(slo={"e2e_ms_p80": 120}, capacity_confidence=0.8, capacity_repeats=3, capacity_start_rps=4.0,
                     capacity_tolerance=0.25, capacity_max_steps=8, max_duration_s=30, capacity_probe_s=1.5,
                     capacity_warmup_s=0.5, capacity_probe_requests=10, confirm_s=2.0)
    result = run_search(engine, cfg)["rate"]
    run0 = [s for s in result.steps if s.repeat == 0]
    rates = [s.rate_rps for s in run0]
    # run 0: doubling from 4 req/s until a probe fails, then bisection of the bracket to 25%
    first_fail = next(i for i, s in enumerate(run0) if not s.passed)
    assert rates[: first_fail + 1] == [4.0 * 2**i for i in range(first_fail + 1)]
    low, high = rates[first_fail - 1] if first_fail else None, rates[first_fail]
    for s in run0[first_fail + 1 :]:
        assert low is not None and s.rate_rps == (low + high) / 2
        low, high = (s.rate_rps, high) if s.passed else (low, s.rate_rps)
    # runs 1 and 2 each probed until their verdict flipped (or ran out of probes)
    assert {s.repeat for s in result.steps} == {0, 1, 2} and len(result.runs) == 3 and result.repeats == 3
    for run in (1, 2):
        verdicts = [s.passed for s in result.steps if s.repeat == run]
        assert 1 <= len(verdicts) <= 4 and (len(set(verdicts)) == 2 or len(verdicts) == 4)
    length = ProbeLength.of(cfg)
    assert all(s.level.requests == length.requests_at(s.at) for s in result.steps if not s.stopped)
    assert result.requests_per_step == 10 and (result.probe_s, result.warmup_s) == (1.5, 0.5)
    # the interval on the runs' crossings, held at the most requests/s any probe saw completed
    ceiling = completed_at_most(result.steps)
    estimate, lo, hi = (min(x, ceiling) for x in interval(result.runs, 0.8))  # type: ignore[type-var]
    assert result.capacity_rps == pytest.approx(estimate) and (result.low, result.high) == (lo, hi)
    assert result.low < result.capacity_rps <= result.high and result.low_rps == result.low
    assert result.output_tokens_per_request == pytest.approx(4) and result.input_tokens_per_request == pytest.approx(5)
    # Queueing arithmetic on the service time the engine delivered (asyncio sleeps overshoot, more on
    # a busy machine): the median request at the lowest rate, where little queues. Timing on a shared
    # machine moves between probes, so it bounds the estimate loosely; the coverage of the interval
    # is checked exactly, on a simulated queue, below.
    lowest = min(result.steps, key=lambda s: s.at).level.e2e_ms
    assert lowest is not None and 40 <= lowest.p50 < 70
    expected = expected_capacity(cfg, lowest.p50 / 1e3)
    assert 0.4 * expected <= result.capacity_rps < 1 / 0.04, (expected, result.runs)  # never above the service rate
    assert result.wall_s > 0 and result.on == "rate"
    # then the plan, tried: 2 s at the lower bound's rate, judged after the warm-up like a probe
    confirmed = result.confirmation
    assert confirmed is not None and confirmed.rate_rps == result.low_rps and confirmed.window_s == 2.0
    assert confirmed.level.requests == math.ceil(result.low_rps * 2.5) and confirmed.judged_requests > 0
    assert confirmed.held == (confirmed.margin is not None and confirmed.margin <= 0)


def test_the_search_by_concurrency_finds_how_many_requests_a_fifo_server_holds() -> None:
    # Closed loop: with c in flight a request waits for the c - 1 ahead of it, so its e2e is about
    # c x 20 ms, and p80 e2e <= 110 ms holds up to 5 in flight (5.5 by interpolation).
    engine = FifoEngine(per_token_s=0.01, tokens=2)
    cfg = LoadConfig(slo={"e2e_ms_p80": 110}, capacity_confidence=0.8, capacity_repeats=2, capacity_on="concurrency",
                     capacity_tolerance=0.25, max_duration_s=30, capacity_probe_s=1.0, capacity_warmup_s=0.2,
                     capacity_probe_requests=10, confirm_s=0)
    result = run_search(engine, cfg)["concurrency"]
    assert result.on == "concurrency" and result.capacity_concurrency is not None
    assert all(s.concurrency is not None and s.rate_rps is None for s in result.steps)
    assert [s.concurrency for s in result.steps if s.repeat == 0][:3] == [1, 2, 4]  # doubling from 1
    service = min(result.steps, key=lambda s: s.at).level.e2e_ms.p50  # type: ignore[union-attr]
    assert 20 <= service < 40
    assert 110 / service - 1.5 <= result.capacity_concurrency <= 110 / service + 1.5, (service, result.runs)
    served = [s.level.request_throughput for s in result.steps]
    assert min(served) * 0.8 <= result.capacity_rps <= max(served) * 1.2  # the req/s served at that concurrency


def test_the_search_by_concurrency_stops_at_a_probes_request_count_and_says_so() -> None:
    # A fast server meets the SLO with every request of a probe's window in flight at once: above 12
    # in flight a window of 12 requests is no longer a steady state, so the search goes no higher.
    engine = FifoEngine(per_token_s=0.0005, tokens=2)
    cfg = LoadConfig(slo={"e2e_ms_p80": 5000}, capacity_confidence=0.8, capacity_repeats=2, capacity_on="concurrency",
                     capacity_max_steps=12, max_duration_s=30, capacity_probe_s=0.3, capacity_warmup_s=0.1,
                     capacity_probe_requests=12, confirm_s=0)
    result = run_search(engine, cfg)["concurrency"]
    assert [s.concurrency for s in result.steps] == [1, 2, 4, 8, 12] and all(s.passed for s in result.steps)
    assert result.capacity_concurrency == 12 and "the capacity is at least 12 in flight" in result.note


def test_when_the_lowest_rate_already_breaks_the_slo_it_says_so_with_that_rates_figures() -> None:
    engine = FifoEngine(per_token_s=0.01, tokens=4)  # 40 ms a request, and the limit is 20 ms
    cfg = LoadConfig(slo={"e2e_ms_p50": 20}, capacity_confidence=0.5, capacity_start_rps=8.0, capacity_min_rps=2.0,
                     max_duration_s=30, capacity_probe_s=1.0, capacity_warmup_s=0.2, capacity_probe_requests=6)
    result = run_search(engine, cfg)["rate"]
    assert [s.rate_rps for s in result.steps] == [8.0, 4.0, 2.0] and not any(s.passed for s in result.steps)
    assert result.capacity_rps is None and result.low is None and result.runs == []  # nothing to repeat
    assert "even the lowest rate probed, 2 req/s, breaks the SLO (e2e_ms_p50 <= 20 ms)" in result.note
    lowest = result.steps[-1].level
    assert lowest.requests == ProbeLength.of(cfg).requests_at(2.0) and lowest.e2e_ms is not None
    assert lowest.e2e_ms.p50 >= 40 and result.confirmation is None  # nothing to plan on, nothing to confirm
    assert result.output_tokens_per_s == pytest.approx(lowest.output_tokens_per_s) and result.output_tokens_per_s > 0


# ---- coverage against a simulated queue whose capacity is known --------------------------------
@pytest.mark.parametrize("scenario", ["rate, fixed 100 ms service, p95 e2e <= 300 ms",
                                      "concurrency, service cv 0.5, p95 e2e <= 1 s"])
def test_the_interval_covers_a_simulated_queues_known_capacity(scenario: str) -> None:
    """benchmarks.capacity_coverage in small (its full run, 400 searches a row, is in
    benchmarks/results/capacity_coverage.md): the 95% interval from 5 runs held the known capacity
    in about 95% of searches with fresh seeds."""
    from benchmarks.capacity_coverage import SCENARIOS, coverage, true_capacity

    sc = SCENARIOS[scenario]
    cfg = LoadConfig(slo=sc.slo)
    truth = true_capacity(sc, requests=200_000, seeds=1)["capacity"]  # the queue's steady state
    got = coverage(sc.server, cfg, sc.on, truth, trials=60, service_rate=10.0)
    assert got["intervals"] == 60 and got["max_probes"] <= cfg.capacity_max_steps + 4 * (cfg.capacity_repeats - 1)
    assert got["low_above_truth"] <= 0.05, got  # target 2.5%; 60 trials
    assert got["coverage"] >= 0.8 and abs(got["median_log_error"]) < 0.1, got


# ---- over-saturation ---------------------------------------------------------------------------
def test_the_saturation_rule_fires_above_a_queues_service_rate_and_not_well_below() -> None:
    from benchmarks.simulated_servers import Queue

    queue = Queue(service_s=0.1)  # 10 req/s
    fired = {}
    for rate in (5.0, 20.0):
        watches = [first_saturation(*map(list, queue.open_loop(rate, 59, seed)), SaturationWatch.for_rate(rate).window_s)
                   for seed in range(100)]
        fired[rate] = sum(w.at is not None for w in watches)
    assert fired[5.0] == 0 and fired[20.0] == 100
    watch = first_saturation(*map(list, queue.open_loop(20.0, 59, 0)), SaturationWatch.for_rate(20.0).window_s)
    assert watch.reason.startswith("over-saturated: over the last") and watch.at is not None


@pytest.mark.slow  # timed probes against a FIFO engine
def test_an_over_saturated_probe_ends_early_and_names_why() -> None:
    requests = [GenerationRequest("x", 2)] * 60

    async def level(rate: float, watch: SaturationWatch | None) -> tuple[list[RequestTrace], float]:
        engine = FifoEngine(per_token_s=0.02, tokens=2)  # 40 ms a request: 25 req/s at most
        t0 = time.perf_counter()
        traces = await drive_level(engine, requests, rate_rps=rate, seed=3, max_duration_s=60, saturation=watch)
        return traces, time.perf_counter() - t0

    watch = SaturationWatch.for_rate(75.0)  # three times what it serves
    traces, took = asyncio.run(level(75.0, watch))
    assert watch.reason.startswith("over-saturated") and watch.at is not None
    cut = [t for t in traces if not t.ok]
    assert cut and all(t.error == f"cut off: {watch.reason}" for t in cut)
    assert len(traces) < len(requests) or len(cut) > len(requests) / 3  # stopped sending, or cut off the backlog
    assert took < 60 * 0.04 * 0.75  # well before the backlog of 60 requests of 40 ms would have drained
    calm = SaturationWatch.for_rate(5.0)
    traces, _ = asyncio.run(level(5.0, calm))
    assert not calm.reason and all(t.ok for t in traces) and len(traces) == 60
