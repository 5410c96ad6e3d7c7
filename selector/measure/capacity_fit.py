"""From the capacity search's probes to a capacity (selector.measure.capacity): margins made monotone in
the level, each run's crossing of the SLO, the interval over the runs, the levels all runs combined call
within the SLO, and the most requests per second any probe saw completed."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.optimize import isotonic_regression
from scipy.stats import t as student_t

from selector.measure.capacity_axis import Axis
from selector.measure.capacity_judge import FLOOR
from selector.records import CapacityStep


def monotone(levels: Sequence[float], margins: Sequence[float], weights: Sequence[float] | None = None
             ) -> np.ndarray:
    """Margins made non-decreasing in the level (isotonic regression). An infinite margin (a probe
    cut off) pools every level above it into itself, as pooling adjacent violators does with +inf:
    those levels fit +inf and the finite levels below are fitted alone, so no constant standing in
    for infinity moves the fit."""
    y = np.maximum(np.asarray(margins, dtype=float), FLOOR)
    w = np.ones_like(y) if weights is None else np.asarray(weights, dtype=float)
    order = np.argsort(levels, kind="stable")
    ys, ws = y[order], w[order]
    infinite = np.flatnonzero(np.isinf(ys))
    cut = int(infinite[0]) if infinite.size else len(ys)
    fitted = np.full_like(ys, np.inf)
    if cut:
        fitted[:cut] = isotonic_regression(ys[:cut], weights=ws[:cut]).x
    fit = np.empty_like(y)
    fit[order] = fitted
    return fit


def crossing(points: Sequence[tuple[float, float]], axis: Axis) -> float:
    """Where one run's monotone fit of margin against level crosses 0: interpolated linearly in
    (log level, margin) between the two probes around it (their geometric mean when the upper
    one's margin is infinite); the lowest level when even that failed, the highest when none did."""
    by_level: dict[float, list[float]] = {}
    for level, margin in points:
        by_level.setdefault(level, []).append(max(margin, FLOOR))
    levels = sorted(by_level)
    fit = monotone(levels, [float(np.mean(by_level[x])) for x in levels], [len(by_level[x]) for x in levels])
    above = [i for i, m in enumerate(fit) if m > 0]
    if not above:
        return levels[-1]
    i = above[0]
    if i == 0:
        return levels[0]
    lo, hi, m0, m1 = levels[i - 1], levels[i], fit[i - 1], fit[i]
    if math.isinf(m1):
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
        by_level.setdefault(s.at, []).append(math.inf if s.margin is None else s.margin)
    levels = sorted(by_level)
    fit = monotone(levels, [float(np.mean(by_level[x])) for x in levels], [len(by_level[x]) for x in levels])
    within = {x: bool(m <= 0) for x, m in zip(levels, fit)}
    for s in steps:
        s.within_fit = within[s.at]
    return within


def completed_at_most(steps: Sequence[CapacityStep]) -> float:
    """The most requests per second any probe saw the server complete (first send to last finish):
    a rate above it is one the server was never seen to sustain."""
    return max((s.level.request_throughput for s in steps), default=math.inf) or math.inf
