"""Two variants scored on the same items: the interval of their mean difference, its test, and the
multiplicity adjustment of a table of such tests.

- 0/1 scores: Tango's score interval for a difference of paired proportions (Tango 1998, "Equivalence
  test and confidence interval for the difference in proportions for the paired-sample design",
  Stat Med 17:891-908) and McNemar's exact test. The score interval keeps its level at n = 40-200
  where the percentile bootstrap of the differences does not (benchmarks/paired_coverage.py: 6.2%
  instead of 2.5% below the margin at 10% discordance, n = 48).
- fractional scores (token F1): a betting confidence bound on each side of the mean paired
  difference (valid at every n for bounded scores; Student's t and the percentile bootstrap run to
  8-11% for 2.5% at the margin on skewed differences), and the Wilcoxon signed-rank test. No cut at
  0.5: both use the raw scores.

Pure functions over numbers, like selector.stats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from scipy.optimize import brentq
from scipy.special import gammaln, xlogy

from selector.stats import mcnemar_exact


def tango_scores(gained, lost, n: int, delta: float) -> np.ndarray:
    """Tango's score statistic for H0: p(gained) - p(lost) = delta, with the discordant cell
    probability at its maximum-likelihood value under H0 (a closed-form quadratic root).

    gained: pairs where only the first variant is right; lost: only the second (arrays of tables
    allowed); n: all pairs. Decreasing in delta; positive when the observed difference is above it."""
    g, l = np.asarray(gained, dtype=float), np.asarray(lost, dtype=float)
    a = 2 * n
    b = -g - l + (2 * n - g + l) * delta
    c = -l * delta * (1 - delta)
    p_lost = (-b + np.sqrt(np.maximum(b * b - 4 * a * c, 0.0))) / (2 * a)
    variance = n * (2 * p_lost + delta * (1 - delta))
    gap = g - l - n * delta
    with np.errstate(divide="ignore", invalid="ignore"):  # variance 0 only at delta = +-1, nothing lost
        z = np.where(variance > 0, gap / np.sqrt(np.maximum(variance, 1e-300)), np.sign(gap) * np.inf)
    return np.where((variance <= 0) & (gap == 0), 0.0, z)


def tango_score(gained: int, lost: int, n: int, delta: float) -> float:
    return float(tango_scores(gained, lost, n, delta))


def noninferiority_exact_p(gained: int, lost: int, n: int, margin: float) -> float:
    """Exact unconditional p-value of H0: p(gained) - p(lost) <= -margin (Chan 1998, "Exact tests of
    equivalence and efficacy with a non-zero lower bound for comparative studies", Stat Med 17):
    the largest probability, over the nuisance discordance on the boundary, of a Tango statistic at
    least as large as the one observed. Keeps its level at every n, where Tango's interval alone
    runs a little over (2.6% for a nominal 2.5% at n = 42, benchmarks/paired_coverage.py)."""
    if margin >= 1:
        return 0.0
    tables, pvalues = exact_p_table(n, round(margin, 12))
    return float(pvalues[tables[(gained, lost)]])


@lru_cache(maxsize=64)
def exact_p_table(n: int, margin: float, grid: int = 400) -> tuple[dict[tuple[int, int], int], np.ndarray]:
    """Every table's exact p at once (the p-value only grows as the statistic falls, so one pass over
    the tables sorted by it gives all tails): ({(gained, lost): index}, p-values)."""
    i, j = np.triu_indices(n + 1)
    b, c = i, j - i  # every (gained, lost) with gained + lost <= n
    z = tango_scores(b, c, n, -margin)
    order = np.argsort(-z, kind="stable")
    b, c, z = b[order], c[order], z[order]
    p_lost = np.linspace(margin, (1 + margin) / 2, grid + 2)[1:-1]  # p(gained) = p_lost - margin
    p_gained = p_lost - margin
    log_coef = gammaln(n + 1) - gammaln(b + 1) - gammaln(c + 1) - gammaln(n - b - c + 1)
    tails = np.zeros(b.size)
    for pg, pl in zip(p_gained, p_lost):  # one nuisance value at a time keeps memory at O(tables)
        probs = np.exp(log_coef + xlogy(b, pg) + xlogy(c, pl) + xlogy(n - b - c, 1 - pg - pl))
        cum = np.cumsum(probs)
        last_tie = np.searchsorted(-z, -z + 1e-9, side="right") - 1  # ties share the largest tail
        tails = np.maximum(tails, cum[last_tie])
    return {(int(g), int(lo)): k for k, (g, lo) in enumerate(zip(b, c))}, np.minimum(tails, 1.0)


def tango_interval(gained: int, lost: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided score interval for the paired difference of proportions: every delta whose score
    statistic stays within the normal quantile. Contains the observed difference."""
    if n <= 0 or gained < 0 or lost < 0 or gained + lost > n:
        raise ValueError(f"need 0 <= gained + lost <= n, got {gained}, {lost}, {n}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    from scipy.stats import norm  # where it is used, as in selector/stats.py

    z = float(norm.ppf(0.5 + confidence / 2))
    observed = (gained - lost) / n
    edge = 1.0 - 1e-12

    def root(target: float, lo: float, hi: float) -> float:
        f = lambda d: tango_score(gained, lost, n, d) - target  # noqa: E731
        if f(lo) * f(hi) > 0:  # the statistic never reaches the quantile before the edge
            return lo if target > 0 else hi
        return float(brentq(f, lo, hi, xtol=1e-10))

    low = root(z, -edge, observed) if observed > -edge else -1.0
    high = root(-z, observed, edge) if observed < edge else 1.0
    return (max(-1.0, low), min(1.0, high))


def paired_binary(v: np.ndarray, r: np.ndarray, confidence: float) -> tuple[float, float, int, int, float]:
    """0/1 scores: (low, high) of v - r by Tango, the flips each way, McNemar's exact p."""
    gained, lost = int(np.sum((v == 1) & (r == 0))), int(np.sum((v == 0) & (r == 1)))
    low, high = tango_interval(gained, lost, v.size, confidence)
    return low, high, lost, gained, mcnemar_exact(lost, gained)


BET_CAP = 0.75  # largest stake relative to the mean tested: every factor stays >= 0.25


def betting_lower(y: np.ndarray, alpha: float, tol: float = 1e-7) -> float:
    """Lower confidence bound on the mean of iid scores in [0, 1], valid at every n (Waudby-Smith &
    Ramdas, "Estimating means of bounded random variables by betting", JRSS-B 2024): the largest m
    whose wealth, betting that each score lies above m, reaches 1/alpha at some item (Ville).

    Stakes: their predictable plug-in, sqrt(2 log(1/alpha) / (n variance so far)), capped at
    BET_CAP / m. The order of the items only has to be fixed before their scores are seen."""
    n = y.size
    seen = np.arange(n)
    running = (0.5 + np.cumsum(y)) / (2 + seen)  # mean after each item, shrunk towards 1/2
    squares = np.concatenate([[0.0], np.cumsum((y - running) ** 2)[:-1]])  # items before each one
    variance = (0.25 + squares) / (1 + seen)
    stake = np.sqrt(2 * math.log(1 / alpha) / (n * variance))
    threshold = math.log(1 / alpha)

    def reached(m: float) -> bool:
        lam = np.minimum(stake, BET_CAP / max(m, 1e-12))
        return bool(np.cumsum(np.log1p(lam * (y - m))).max() >= threshold)

    low, high = 0.0, float(y.mean())  # every m above the mean is never reached in expectation
    if not reached(low + tol):
        return 0.0
    while high - low > tol:
        mid = (low + high) / 2
        low, high = (mid, high) if reached(mid) else (low, mid)
    return low


def paired_fractional(d: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """Fractional scores: (low, high) of the mean difference, each end a betting bound at
    (1 - confidence) / 2 on (d + 1) / 2, and Wilcoxon's signed-rank p on the raw differences.

    Not Student's t nor the percentile bootstrap: on skewed differences (most items unchanged, a
    few dropping far) both declared non-inferiority in 8-11% of draws at the margin for a nominal
    2.5% at n = 40-48 (benchmarks/paired_coverage.py); the betting bound holds at every n."""
    alpha = (1 - confidence) / 2
    y = (np.asarray(d, dtype=float) + 1) / 2
    low = 2 * betting_lower(y, alpha) - 1
    high = 1 - 2 * betting_lower(1 - y, alpha)
    from scipy.stats import wilcoxon

    nonzero = d[d != 0]
    p = float(wilcoxon(nonzero).pvalue) if nonzero.size else 1.0
    return max(-1.0, low), min(1.0, high), p


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment: adjusted p-values controlling the family-wise error over all of
    them (flag those below alpha). Same order as given."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted
