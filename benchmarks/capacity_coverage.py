"""The capacity interval's coverage, checked by simulation against a queue whose capacity is known.

    python -m benchmarks.capacity_coverage [--trials 400] [--truth-runs 4000] [--repeats 2 3 4 5 6 8]

A simulated server, first come first served, one request at a time, service times drawn per run
(lognormal around `service_s`; cv 0 is a fixed time). Every probe is what the capacity search sees
from a real server: one run of n requests (requests_per_step) at a Poisson rate (arrivals from the
run's seed, as the load driver draws them) or at a concurrency (closed loop), its requests' e2e,
ended early by the same over-saturation rule. The search under test is selector's own
(selector.measure.capacity.search_capacity), unchanged; only the probe is simulated.

The known capacity: each run (a seed) has its own crossing of the SLO, found exactly by bisecting
that run's probe over the rate (30 halvings of a 50 000-fold range) or stepping the concurrency;
the queue's capacity is the geometric mean of the crossings of `--truth-runs` runs, what the
search's interval is for. Per number of runs (capacity_repeats; and 5 runs at the former tolerance
0.1), over `--trials` searches with fresh seeds: how often the interval held the known capacity,
its median width (high / low), and the probes it spent. Then the over-saturation rule alone: how
often it ends a probe at rates around the service rate, wrongly or not, and the time it saves.
Results: benchmarks/results/capacity_coverage.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from selector.config import LoadConfig
from selector.engines.trace import RequestTrace
from selector.measure.capacity import ProbeAt, percentile_limits, requests_per_step, search_capacity
from selector.measure.load_driver import LevelOutcome, poisson_arrivals, summarize_level
from selector.measure.saturation import SaturationWatch, first_saturation

TOKENS = 16  # output tokens a simulated request reports


@dataclass(frozen=True)
class Queue:
    """One server, FIFO, service times lognormal with mean service_s and coefficient of variation cv."""

    service_s: float = 0.1
    cv: float = 0.0

    def services(self, n: int, seed: int) -> np.ndarray:
        if self.cv == 0:
            return np.full(n, self.service_s)
        sigma = math.sqrt(math.log(1 + self.cv**2))
        rng = np.random.default_rng([seed, 7])
        return rng.lognormal(math.log(self.service_s) - sigma**2 / 2, sigma, size=n)

    def open_loop(self, rate: float, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(send, finish) times of n Poisson arrivals at `rate` (the load driver's own arrivals)."""
        sent = np.asarray(poisson_arrivals(n, rate, seed))
        ends, free = np.empty(n), 0.0
        for i, (t, s) in enumerate(zip(sent, self.services(n, seed))):
            free = max(t, free) + s
            ends[i] = free
        return sent, ends

    def closed_loop(self, concurrency: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(send, finish) times of n requests, `concurrency` in flight: each finished one is replaced."""
        clients = [0.0] * min(concurrency, n)  # when each client sends its next request
        sent, ends, free = np.empty(n), np.empty(n), 0.0
        for i, s in enumerate(self.services(n, seed)):
            c = int(np.argmin(clients))
            sent[i] = clients[c]
            free = max(sent[i], free) + s
            ends[i] = clients[c] = free
        return sent, ends


def outcome(sent: np.ndarray, ends: np.ndarray, slo: dict[str, float], stop_saturated: bool,
            rate: float | None = None, concurrency: int | None = None) -> LevelOutcome:
    """The probe as the load driver would have measured it: cut off where over-saturated."""
    traces = [RequestTrace(sent=float(s), end=float(e), token_times=[float(e)], output_tokens=TOKENS)
              for s, e in zip(sent, ends)]
    stopped = ""
    if stop_saturated and rate is not None:
        watch = first_saturation(list(sent), list(ends), SaturationWatch.for_rate(rate).window_s)
        if watch.at is not None:
            stopped = watch.reason
            traces = [t if t.end <= watch.at else RequestTrace(sent=t.sent, end=watch.at, error="cut off")
                      for t in traces if t.sent <= watch.at]
    duration = max(t.end for t in traces) - min(t.sent for t in traces)
    level = summarize_level(traces, duration, slo, concurrency, rate)
    return LevelOutcome(level, traces, 0.0, stopped)


def simulated_probe(queue: Queue, cfg: LoadConfig, on: str, base_seed: int) -> ProbeAt:
    """What search_capacity calls: run `run` of a level, with run k's seed base_seed + k."""
    n = requests_per_step(cfg)

    async def probe(level: float, run: int) -> LevelOutcome:
        if on == "rate":
            return outcome(*queue.open_loop(level, n, base_seed + run), cfg.slo, cfg.capacity_stop_saturated,
                           rate=level)
        return outcome(*queue.closed_loop(int(level), n, base_seed + run), cfg.slo, False, concurrency=int(level))

    return probe


def run_crossing(queue: Queue, cfg: LoadConfig, on: str, seed: int) -> float:
    """One run's exact crossing of the SLO: bisection of its own probe over the level (a
    concurrency's crossing is interpolated like the search does, in (log level, margin))."""
    ((_, q, limit),) = percentile_limits(cfg.slo).values()  # one e2e limit
    n = requests_per_step(cfg)

    def margin(level: float) -> float:
        sent, ends = queue.open_loop(level, n, seed) if on == "rate" else queue.closed_loop(int(level), n, seed)
        e2e = (ends - sent) * 1e3
        if on == "rate" and cfg.capacity_stop_saturated:
            at = first_saturation(list(sent), list(ends), SaturationWatch.for_rate(level).window_s).at
            if at is not None:
                e2e = np.where(ends <= at, e2e, np.inf)[sent <= at]
        return math.log(float(np.percentile(e2e, q, method="inverted_cdf")) / limit)

    if on == "concurrency":
        c = 1
        while margin(c) <= 0:
            c += 1
        if c == 1:
            return 1.0
        m0, m1 = margin(c - 1), min(margin(c), 10.0)
        return math.exp(math.log(c - 1) + (0 - m0) / (m1 - m0) * (math.log(c) - math.log(c - 1)))
    low, high = 1e-3 / queue.service_s, 50.0 / queue.service_s
    for _ in range(30):
        mid = math.sqrt(low * high)
        low, high = (mid, high) if margin(mid) <= 0 else (low, mid)
    return low


def true_capacity(queue: Queue, cfg: LoadConfig, on: str, runs: int, first_seed: int = 10**6) -> dict[str, float]:
    crossings = np.array([run_crossing(queue, cfg, on, first_seed + i) for i in range(runs)])
    logs = np.log(crossings)
    return {"capacity": float(np.exp(logs.mean())), "log_sd": float(logs.std(ddof=1)),
            "p5": float(np.percentile(crossings, 5)), "p95": float(np.percentile(crossings, 95))}


def coverage(queue: Queue, cfg: LoadConfig, on: str, truth: float, trials: int, first_seed: int = 0
             ) -> dict[str, Any]:
    """Searches with fresh seeds: how often the interval held `truth`, its width, the probes spent."""
    held, widths, probes, errors, low_over = 0, [], [], [], 0
    for trial in range(trials):
        seed = first_seed + 1000 * trial
        result = asyncio.run(search_capacity(simulated_probe(queue, cfg, on, seed), cfg, on))
        probes.append(len(result.steps))
        estimate = result.estimate
        if estimate is not None:
            errors.append(math.log(estimate / truth))
        if result.low is not None and result.high is not None:
            held += result.low <= truth <= result.high
            low_over += result.low > truth
            widths.append(result.high / result.low)
    intervals = len(widths)
    return {"repeats": cfg.capacity_repeats, "tolerance": cfg.capacity_tolerance, "trials": trials, "intervals": intervals,
            "coverage": held / intervals if intervals else None,
            "low_above_truth": low_over / intervals if intervals else None,
            "median_width": float(np.median(widths)) if widths else None,
            "mean_probes": float(np.mean(probes)), "max_probes": int(np.max(probes)),
            "median_log_error": float(np.median(errors)) if errors else None,
            "rmse_log": float(np.sqrt(np.mean(np.square(errors)))) if errors else None}


SCENARIOS = {  # name -> (queue, axis, SLO)
    "rate, fixed 100 ms service, p95 e2e <= 300 ms": (Queue(0.1, 0.0), "rate", {"e2e_ms_p95": 300.0}),
    "rate, service cv 0.5, p95 e2e <= 600 ms": (Queue(0.1, 0.5), "rate", {"e2e_ms_p95": 600.0}),
    "rate, fixed 100 ms service, p95 e2e <= 1 s": (Queue(0.1, 0.0), "rate", {"e2e_ms_p95": 1000.0}),
    "concurrency, service cv 0.5, p95 e2e <= 1 s": (Queue(0.1, 0.5), "concurrency", {"e2e_ms_p95": 1000.0}),
}


def saturation(queue: Queue, limit_ms: float, rate: float, probes: int, n: int = 59) -> dict[str, float]:
    """How often the over-saturation rule ends a probe at `rate`, how often such a probe would have
    met the SLO had it run to its end, and the share of the probe's time the early end saved."""
    stopped = flipped = 0
    saved = []
    for seed in range(probes):
        sent, ends = queue.open_loop(rate, n, seed)
        watch = first_saturation(list(sent), list(ends), SaturationWatch.for_rate(rate).window_s)
        if watch.at is not None:
            stopped += 1
            flipped += float(np.percentile((ends - sent) * 1e3, 95, method="inverted_cdf")) <= limit_ms
            saved.append((ends.max() - watch.at) / (ends.max() - sent.min()))
    return {"rate_over_service_rate": rate * queue.service_s, "stopped": stopped / probes,
            "stopped_would_have_passed": flipped / probes, "time_saved": float(np.mean(saved)) if saved else 0.0}


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.common import write_results

    p = argparse.ArgumentParser(prog="python -m benchmarks.capacity_coverage", description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=400)
    p.add_argument("--truth-runs", type=int, default=4000)
    p.add_argument("--repeats", type=int, nargs="+", default=[2, 3, 4, 5, 6, 8])
    p.add_argument("--confidence", type=float, default=0.95)
    args = p.parse_args(argv)
    t0 = time.monotonic()
    rows = []
    for name, (queue, on, slo) in SCENARIOS.items():
        base = LoadConfig(slo=slo, capacity_confidence=args.confidence, capacity_start_rps=1.0,
                          capacity_start_concurrency=1)
        truth = true_capacity(queue, base, on, args.truth_runs)
        print(f"{name}: capacity {truth['capacity']:.3g} (one run's crossing: log sd {truth['log_sd']:.3f})", flush=True)
        runs = [(r, base.capacity_tolerance) for r in args.repeats] + [(5, 0.1)]  # 0.1: the former tolerance
        for r, tolerance in runs:
            got = coverage(queue, replace(base, capacity_repeats=r, capacity_tolerance=tolerance), on,
                           truth["capacity"], args.trials)
            rows.append({"scenario": name, "truth": truth, **got})
            print(f"  repeats {r}, tolerance {tolerance:g}: coverage {got['coverage']:.3f}, median width "
                  f"x{got['median_width']:.2f}, {got['mean_probes']:.1f} probes", flush=True)
    saturated = [{"scenario": name, **saturation(queue, slo["e2e_ms_p95"], x / queue.service_s, args.trials)}
                 for name, (queue, on, slo) in SCENARIOS.items() if on == "rate"
                 for x in (0.5, 0.8, 0.9, 1.0, 1.2, 1.5, 2.0)]
    data = {"args": vars(args), "wall_s": round(time.monotonic() - t0, 1), "rows": rows, "saturation": saturated}
    write_results("capacity_coverage", data, markdown(data))
    return 0


def markdown(data: dict[str, Any]) -> str:
    a = data["args"]
    lines = ["# The capacity interval's coverage, by simulation", "",
             f"`python -m benchmarks.capacity_coverage --trials {a['trials']} --truth-runs {a['truth_runs']}`: "
             f"{a['trials']} searches per row, each with fresh seeds, against a simulated first-come-first-served "
             f"server whose capacity is known (the geometric mean of {a['truth_runs']} runs' exact crossings of the "
             f"SLO); {a['confidence']:.0%} intervals; the search and its over-saturation rule are selector's own. "
             f"Wall time {data['wall_s']:.0f} s.", "",
             "| scenario | known capacity | one run's log sd | runs | tolerance | coverage | low bound above it "
             "| median high/low | probes (mean / max) | rmse of log estimate |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        t = r["truth"]
        lines.append(f"| {r['scenario']} | {t['capacity']:.3g} | {t['log_sd']:.3f} | {r['repeats']} | "
                     f"{r['tolerance']:g} | {r['coverage']:.3f} | {r['low_above_truth']:.3f} | {r['median_width']:.2f} | "
                     f"{r['mean_probes']:.1f} / {r['max_probes']} | {r['rmse_log']:.3f} |")
    lines += ["", "Over-saturation (the rule of selector/measure/saturation.py on probes of 59 requests, "
              f"{a['trials']} per row): how often it ended a probe, how often it ended one that would have met the "
              "SLO had it run to its end (both shares of all probes), and the share of the probe's time the early end "
              "saved (mean over ended probes).",
              "", "| scenario | rate / service rate | ended early | ended, yet would have passed | time saved |",
              "|---|---|---|---|---|"]
    for r in data["saturation"]:
        lines.append(f"| {r['scenario']} | {r['rate_over_service_rate']:g} | {r['stopped']:.1%} | "
                     f"{r['stopped_would_have_passed']:.1%} | {r['time_saved']:.0%} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
