"""Percentile summaries of latency samples."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from selector.records import Percentiles


def summarize(samples_ms: Sequence[float]) -> Percentiles:
    a = np.asarray(samples_ms, dtype=float)
    if a.size == 0:
        raise ValueError("no samples to summarize")
    p = np.percentile(a, [50, 90, 95, 99])
    return Percentiles(p50=p[0], p90=p[1], p95=p[2], p99=p[3], mean=float(a.mean()), n=int(a.size))
