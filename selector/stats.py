"""Statistics for accuracy estimates: confidence intervals on proportions and means."""

from __future__ import annotations

import math

from scipy.stats import norm


def wilson_interval(successes: float, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (well-behaved at 0, 1 and small n)."""
    if n <= 0:
        return (0.0, 1.0)
    z = float(norm.ppf(0.5 + confidence / 2))
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))
