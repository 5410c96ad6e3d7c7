"""Steady-state probes: how long a capacity probe runs, which of its requests are judged, and how
a probe whose backlog grows is told apart from one that holds.

A server's latency at a rate is a property of its steady state, the regime its queue settles in
under that traffic for as long as it lasts. A probe that starts from an idle server and ends after
a few dozen requests measures a burst instead: near saturation the backlog has not built up yet
when the burst ends, so it passes rates the server cannot hold (59-request bursts put an M/D/1
server with a 100 ms service, which completes at most 10 req/s, at 10.9 req/s for p95 <= 1 s;
its steady state holds 8.48). So a probe
- sends for `warmup_s + window_s` seconds (at least `min_requests` judged, so slow rates run longer),
- is judged only on the requests sent after the warm-up (`warmup_s` seconds from its first send: the
  time an idle queue needs to fill to its working level; the window that follows is what is measured),
- and is judged on its window's percentile *plus the latency its window gained* (`trend`): the
  least-squares slope of latency over send time, times the window's length. A probe whose backlog
  grows has a rising latency; projecting the rise one window ahead fails it even while its window's
  percentile is still under the limit, and the margin stays continuous for the search's crossing.

Closed-loop (concurrency) probes use the same window: their number of requests in the system is
the concurrency from the first send, so there is no backlog to build and the warm-up only has to
cover the first round of requests (benchmarks/capacity_coverage checks it against long runs).

Pure functions over request traces, so the live search and the simulations share them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from selector.config import LoadConfig
from selector.trace import RequestTrace


@dataclass(frozen=True)
class ProbeLength:
    """How long one capacity probe sends, and which part of it is judged."""

    warmup_s: float
    window_s: float
    min_requests: int

    @classmethod
    def of(cls, cfg: LoadConfig) -> ProbeLength:
        return cls(cfg.capacity_warmup_s, cfg.capacity_probe_s, cfg.capacity_probe_requests)

    def window_at(self, rate: float) -> float:
        """The judged window at a rate: its seconds, stretched to hold min_requests."""
        return max(self.window_s, self.min_requests / rate)

    def span_at(self, rate: float) -> float:
        """Seconds of arrivals at a rate, warm-up included."""
        return self.warmup_s + self.window_at(rate)

    def requests_at(self, rate: float) -> int:
        """Requests an open-loop probe at `rate` sends (its Poisson arrivals then span about span_at)."""
        return max(1, math.ceil(rate * self.span_at(rate)))

    def closed_done(self, sent: Sequence[float]) -> bool:
        """A closed-loop probe has sent enough (send times from its start): for warmup_s + window_s
        seconds, and min_requests of them after the warm-up."""
        return bool(sent) and max(sent) >= self.warmup_s + self.window_s and \
            sum(1 for t in sent if t >= self.warmup_s) >= self.min_requests


def judged(traces: Sequence[RequestTrace], warmup_s: float) -> list[RequestTrace]:
    """The requests sent at least warmup_s after the probe's first send."""
    if not traces:
        return []
    start = min(t.sent for t in traces)
    return [t for t in traces if t.sent - start >= warmup_s]


def rise(sent: Sequence[float], values: Sequence[float]) -> float:
    """How much the values grew over the span of their send times: the least-squares slope of value
    against send time, times that span (0 when flat or falling, or fewer than 3 points). Values that
    are infinite (failed requests) are left out: they fail the probe through its percentile."""
    pairs = [(s, v) for s, v in zip(sent, values) if math.isfinite(v)]
    if len(pairs) < 3:
        return 0.0
    x, y = np.asarray(pairs, dtype=float).T
    span = float(x.max() - x.min())
    if span <= 0:
        return 0.0
    slope = float(np.polyfit(x - x.mean(), y, 1)[0])
    return max(0.0, slope * span)
