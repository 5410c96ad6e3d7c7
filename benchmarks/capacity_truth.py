"""The truth the capacity search is checked against: a simulated server's steady-state capacity,
found without the search (analytic for M/M/1; else long runs bisected over the rate, or a closed
loop's margins crossed over the concurrency)."""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from benchmarks.simulated_servers import BatchServer, Queue, Server
from selector.measure.capacity_axis import Axis
from selector.measure.capacity_fit import crossing
from selector.measure.capacity_judge import percentile_limits

WARMUP_SHARE = 0.1  # of a truth run, left out as warm-up


def the_limit(slo: dict[str, float]) -> tuple[float, float]:
    """(percentile, limit in seconds) of the scenario's one e2e limit."""
    ((metric, q, limit_ms),) = percentile_limits(slo).values()
    assert metric == "e2e_ms", metric
    return q, limit_ms / 1e3


def steady_percentile(e2e: np.ndarray, q: float) -> float:
    """The q-th percentile of a long run's sojourn times, its first WARMUP_SHARE left out."""
    return float(np.percentile(e2e[int(len(e2e) * WARMUP_SHARE):], q, method="inverted_cdf"))


def mm1_capacity(service_rate: float, q: float, limit_s: float) -> float:
    """M/M/1: the sojourn time is exponential with rate mu - lambda; its q-quantile is
    ln(1 / (1 - q)) / (mu - lambda), at the limit when lambda = mu - ln(1 / (1 - q)) / limit."""
    return max(0.0, service_rate - math.log(1 / (1 - q / 100)) / limit_s)


def steady_rate_p(server: Server, rate: float, q: float, gaps: np.ndarray, seed: int) -> float:
    sent = np.cumsum(gaps / rate)
    return steady_percentile(server.ends(sent, seed) - sent, q)


def rate_crossing(server: Server, q: float, limit_s: float, requests: int, seed: int, halvings: int = 24) -> float:
    """One long run's steady-state capacity: the rate where its p95 crosses the limit (bisection
    between 0 and the service rate, the same random numbers at every rate)."""
    gaps = server.unit_gaps(requests, seed)
    low, high = 0.0, server.service_rate
    if steady_rate_p(server, 1e-6 * high, q, gaps, seed) > limit_s:
        return 0.0
    for _ in range(halvings):
        mid = (low + high) / 2
        low, high = (mid, high) if steady_rate_p(server, mid, q, gaps, seed) <= limit_s else (low, mid)
    return (low + high) / 2


def concurrency_crossing(server: Server, q: float, limit_s: float, requests: int, seed: int
                         ) -> tuple[float, list[tuple[int, float]]]:
    """One long closed-loop run per concurrency: its margins log(p95 / limit) from 1 up to two past
    the first over the limit, and where the search's `crossing` puts them across 0."""
    points: list[tuple[int, float]] = []
    over = 0
    c = 1
    while over < 3 and c < 10_000:
        sent, ends = server.closed_loop_ends(c, requests, seed)
        m = math.log(steady_percentile(ends - sent, q) / limit_s)
        points.append((c, m))
        over += m > 0
        c += 1
    axis = Axis("concurrency", 1.0, 1.0, 0.25)
    return float(crossing([(float(c), m) for c, m in points], axis)), points


@dataclass(frozen=True)
class Scenario:
    name: str
    server: Queue | BatchServer
    on: str  # rate | concurrency
    slo: dict[str, float]

    def key(self, requests: int, seeds: int) -> str:
        """What a truth depends on: a cached truth is taken back only when this matches."""
        blob = json.dumps({"server": type(self.server).__name__, **asdict(self.server), "on": self.on,
                           "slo": self.slo, "requests": requests, "seeds": seeds, "warmup": WARMUP_SHARE},
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def true_capacity(scenario: Scenario, requests: int = 1_000_000, seeds: int = 2, first_seed: int = 10**6
                  ) -> dict[str, Any]:
    """The scenario's steady-state capacity (rate in req/s, or concurrency), and how it was found."""
    server, q = scenario.server, the_limit(scenario.slo)[0]
    limit_s = the_limit(scenario.slo)[1]
    t0 = time.monotonic()
    out: dict[str, Any] = {"key": scenario.key(requests, seeds), "requests": requests, "seeds": seeds,
                           "service_rate": server.service_rate}
    if scenario.on == "concurrency":
        found = [concurrency_crossing(server, q, limit_s, requests, first_seed + i) for i in range(seeds)]
        runs = [c for c, _ in found]
        out["margins"] = [[round(m, 4) for _, m in points] for _, points in found]
        out["method"] = f"closed loop, {requests} requests a concurrency, the search's crossing"
    else:
        runs = [rate_crossing(server, q, limit_s, requests, first_seed + i) for i in range(seeds)]
        out["method"] = f"bisection over the rate, {requests} requests a rate, first {WARMUP_SHARE:.0%} left out"
    out["runs"] = runs
    out["capacity"] = float(np.mean(runs))
    out["se"] = float(np.std(runs, ddof=1) / math.sqrt(len(runs))) if len(runs) > 1 else None
    if isinstance(server, Queue) and server.dist == "exponential" and scenario.on == "rate":
        out["simulated"] = out["capacity"]
        out["capacity"] = mm1_capacity(server.service_rate, q, limit_s)
        out["method"] = "analytic: mu - ln(1 / (1 - q)) / limit (simulated alongside)"
        out["se"] = 0.0
    out["seconds"] = round(time.monotonic() - t0, 1)
    return out
