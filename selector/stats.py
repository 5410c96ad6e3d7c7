"""Statistics for accuracy estimates: confidence intervals on proportions and means, paired tests
between two variants scored on the same items, and the sample sizes needed to tell two apart.

Pure functions over numbers; nothing here knows about records or policies.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

# scipy.stats (about a second to import on 2 cores) is imported where it is used: a variant's own
# process scores its items with Clopper-Pearson intervals, which need only scipy.special.
_NORMAL = NormalDist()

# Bootstrap resamples are drawn in blocks so memory stays bounded (block rows x n items).
_BOOTSTRAP_BLOCK_CELLS = 2_000_000


def _z(confidence: float) -> float:
    """Two-sided normal quantile for a confidence level in (0, 1)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    return _NORMAL.inv_cdf(0.5 + confidence / 2)


def wilson_interval(successes: float, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (well-behaved at 0, 1 and small n)."""
    if n <= 0:
        return (0.0, 1.0)
    z = _z(confidence)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # Rounding can put the bound a hair past p at p=0 or 1; the interval always contains p.
    return (max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half)))


def bootstrap_interval(
    scores: Sequence[float] | np.ndarray,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval for the mean of `scores` (scipy's; deterministic for a given seed).

    Passing per-item differences between two variants gives the paired bootstrap of the mean
    difference: resampling items keeps each item's pair together.
    """
    values = np.asarray(scores, dtype=float)
    if values.ndim != 1 or values.size == 0:
        raise ValueError("bootstrap_interval needs a non-empty 1-D sequence of scores")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    _z(confidence)  # validates the level
    if np.all(values == values[0]):  # no spread (or one item): every resample has the same mean
        return (float(values[0]), float(values[0]))
    from scipy.stats import bootstrap

    result = bootstrap((values,), np.mean, n_resamples=n_resamples, confidence_level=confidence,
                       method="percentile", batch=max(1, _BOOTSTRAP_BLOCK_CELLS // values.size),
                       rng=np.random.default_rng(seed))
    return (float(result.confidence_interval.low), float(result.confidence_interval.high))


def clopper_pearson_interval(successes: float, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson's exact interval for a binomial proportion: each end keeps its level at every
    n and p (exactly, over every count: at most 2.5% one-sided at n = 24, 48 and 100, where Wilson's
    runs to 3.37% at p = 0.504 and 13.4% at p = 0.003 for n = 48; benchmarks/verdict_edges.py).
    A fractional count (scores in [0, 1]) is rounded down for the low end and up for the high."""
    from scipy.special import betaincinv  # the beta distribution's quantile, without scipy.stats

    if n <= 0:
        return (0.0, 1.0)
    alpha = 1 - confidence
    k_low, k_high = math.floor(successes + 1e-9), math.ceil(successes - 1e-9)
    low = 0.0 if k_low <= 0 else float(betaincinv(k_low, n - k_low + 1, alpha / 2))
    high = 1.0 if k_high >= n else float(betaincinv(k_high + 1, n - k_high, 1 - alpha / 2))
    return (low, high)


def mean_interval(
    scores: Sequence[float], binary: bool, confidence: float = 0.95, ci_method: str = "exact",
    n_resamples: int = 2000, seed: int = 0,
) -> tuple[float, float, str]:  # fmt: skip
    """The one interval of a task's mean, for the evaluation, the decision and the report alike.

    ci_method="exact" (the default): Clopper-Pearson on sum / n, for 0/1 scores and, with the sum
    rounded down for the low end and up for the high, for fractional scores in [0, 1]. For 0/1
    scores each end keeps its level at every n and p; for fractional ones no proof is known, but
    exact enumeration of every two-point {0, b} and three-point {0, a, 1} score distribution
    found none above the level (worst 2.50% at n = 24 and 48, the 0/1 case itself;
    benchmarks/verdict_edges.py). ci_method="wilson": Wilson's score interval on sum / n, narrower
    and not always at its level (one-sided at n = 48: 3.37% at p = 0.504, 9.8% at p = 0.011, 13.4%
    at p = 0.003; the same for fractional scores that happen to be all 0 or 1).
    ci_method="bootstrap": the percentile bootstrap of the item scores (6.8% at n = 42, p = 0.9).
    `binary` is kept for callers: every method treats 0/1 and fractional scores alike.
    Returns (low, high, method)."""
    values = np.asarray(scores, dtype=float)
    in_unit = bool(values.size) and values.min() >= 0 and values.max() <= 1
    if ci_method == "exact" and in_unit:
        low, high = clopper_pearson_interval(float(values.sum()), int(values.size), confidence)
        return low, high, "exact"
    if ci_method == "wilson" and in_unit:
        low, high = wilson_interval(float(values.sum()), int(values.size), confidence)
        return low, high, "wilson"
    low, high = bootstrap_interval(values, confidence, n_resamples, seed)
    return low, high, "bootstrap"


def newcombe_diff_interval(
    p1: float, n1: int, p2: float, n2: int, confidence: float = 0.95
) -> tuple[float, float]:
    """Interval for p1 - p2 from two independent samples (Newcombe's hybrid score method 10).

    Used when two variants cannot be paired item by item; built from the two Wilson intervals,
    so it stays inside [-1, 1] and behaves at 0 and 1 where the Wald interval does not.
    """
    l1, u1 = wilson_interval(p1 * n1, n1, confidence)
    l2, u2 = wilson_interval(p2 * n2, n2, confidence)
    d = p1 - p2
    return (d - math.hypot(p1 - l1, u2 - p2), d + math.hypot(u1 - p1, p2 - l2))


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: a binomial test of b successes in b + c discordant pairs.

    b and c count the pairs where only one of the two variants was right. With no discordant
    pairs there is no evidence of a difference: p = 1.
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got {b}, {c}")
    if b + c == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(binomtest(b, b + c, 0.5).pvalue)


def two_proportion_sample_size(
    p1: float, p2: float, confidence: float = 0.95, power: float = 0.8
) -> float:
    """Items per variant for a two-sided test of p1 != p2 on independent samples (no continuity
    correction). Infinite when p1 == p2: no number of items tells them apart."""
    delta = abs(p1 - p2)
    if delta == 0:
        return math.inf
    z_a, z_b = _z(confidence), _NORMAL.inv_cdf(power)
    p_bar = (p1 + p2) / 2
    root = z_a * math.sqrt(2 * p_bar * (1 - p_bar)) + z_b * math.sqrt(p1 * (1 - p1) + p2 * (1 - p2))
    return root * root / (delta * delta)


def paired_sample_size(
    p10: float, p01: float, confidence: float = 0.95, power: float = 0.8
) -> float:
    """Paired items for McNemar's test to detect the observed discordance (Connor 1987).

    p10: share of items only the first variant gets right; p01: only the second. Infinite when
    they are equal (the variants disagree as often in each direction)."""
    delta = abs(p10 - p01)
    if delta == 0:
        return math.inf
    psi = p10 + p01
    z_a, z_b = _z(confidence), _NORMAL.inv_cdf(power)
    root = z_a * math.sqrt(psi) + z_b * math.sqrt(max(psi - delta * delta, 0.0))
    return root * root / (delta * delta)


def paired_mean_sample_size(
    mean_diff: float, sd_diff: float, confidence: float = 0.95, power: float = 0.8
) -> float:
    """Paired items for a two-sided test of a mean paired difference (fractional scores): the normal
    approximation n = ((z_a + z_b) sd / mean)^2 on the raw differences, no cut at 0.5. Infinite
    when the mean difference is 0."""
    if mean_diff == 0:
        return math.inf
    z_a, z_b = _z(confidence), _NORMAL.inv_cdf(power)
    return ((z_a + z_b) * sd_diff / mean_diff) ** 2
