"""Judging one probe of the capacity search (selector.measure.capacity) against measure.load.slo's
percentile limits: its margin, log((estimate + rise) / limit) of the limit it misses most, over the
requests sent after its warm-up."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from selector.trace import RequestTrace
from selector.measure.load_driver import parse_slo_key
from selector.measure.steady import judged, rise

FLOOR = -10.0  # a margin of -inf (no request carried a limited figure) is fitted as this: "far under"


def percentile_limits(slo: dict[str, float]) -> dict[str, tuple[str, float, float]]:
    """slo key -> (figure, percentile, limit ms) for the keys that are percentiles."""
    out = {}
    for key, limit in slo.items():
        metric, q = parse_slo_key(key)
        if q is not None:
            out[key] = (metric, q, float(limit))
    return out


def figure(trace: RequestTrace, metric: str) -> float | None:
    """A request's value of a figure; the inter-token figure per request is its mean gap (the
    gaps inside one request are not independent samples)."""
    if not trace.ok:
        return math.inf
    return {"ttft_ms": trace.ttft_ms, "itl_ms": trace.itl_mean_ms, "e2e_ms": trace.e2e_ms,
            "queue_ms": trace.queue_ms}[metric]


def judge(traces: Sequence[RequestTrace], limits: dict[str, tuple[str, float, float]], warmup_s: float = 0.0
          ) -> tuple[float, dict[str, dict[str, float | None]]]:
    """A probe's margin and, per limit, its estimate, rise and limit, over the requests sent after
    the warm-up (selector.measure.steady). The margin is log((estimate + rise) / limit) of the limit
    it misses most: the window's percentile plus what that figure gained across the window (a
    growing backlog); -inf when no request carried any limited figure, +inf when the percentile fell
    on a failed request, or when the probe ended before its window held any request (cut off as
    over-saturated during its warm-up). A figure no request carried (queue time from a server that
    hides it) is not held against the probe."""
    window = judged(traces, warmup_s)
    if traces and not window:
        return math.inf, {key: {"estimate": None, "rise": None, "limit": limit}
                          for key, (_, _, limit) in limits.items()}
    margin, checks = -math.inf, {}
    for key, (metric, q, limit) in limits.items():
        pairs = [(t.sent, v) for t in window if (v := figure(t, metric)) is not None]
        if not pairs:
            checks[key] = {"estimate": None, "rise": None, "limit": limit}
            continue
        estimate = float(np.percentile([v for _, v in pairs], q, method="inverted_cdf"))
        grew = rise([s for s, _ in pairs], [v for _, v in pairs])
        checks[key] = {"estimate": estimate if math.isfinite(estimate) else None, "rise": grew, "limit": limit}
        margin = max(margin, math.log(max(estimate + grew, 1e-9) / limit) if math.isfinite(estimate) else math.inf)
    return margin, checks
