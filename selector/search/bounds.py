"""Anytime-valid upper bounds on a finite population's mean, seen through a prefix of a random order.

The population is one task's N item scores for one variant; the order is a uniformly random
permutation fixed before any item is scored, and items are drawn from it without replacement. All
probabilities here are over that order, for a fixed population: no model of the scores is assumed.

Two bounds, both one-sided (they bound the full-set mean from above):
- 0/1 scores: exact hypergeometric tails, with an alpha-spending function over the planned looks
  (a union bound: the levels of all looks sum to at most alpha);
- scores in [0, 1]: a betting martingale for sampling without replacement (Waudby-Smith & Ramdas,
  "Confidence sequences for sampling without replacement", NeurIPS 2020), valid at every item by
  Ville's inequality, so it needs no spending at all.

Pure functions over numbers; nothing here knows about tasks, floors or policies.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

# scipy.stats is imported where it is used: it takes ~0.5 s, and a variant's worker imports this
# module for the evaluation order even when no floor test runs (search=grid, stop_early=false).

SPENDING = ("pocock", "linear", "obrien_fleming")
BET_CAP = 0.9  # largest stake; keeps every factor >= 0.1 for every feasible mean (0.75 and 0.99 compared)


def spent(fraction: float, alpha: float, spending: str) -> float:
    """Alpha spent by the time `fraction` (0..1) of the interim information has been seen.

    pocock: alpha ln(1 + (e - 1) f), Lan & DeMets' Pocock-type function: spends most early.
    linear: alpha f. obrien_fleming: 2 - 2 Phi(z_{1-alpha/2} / sqrt f), one-sided Lan-DeMets
    O'Brien-Fleming type: spends almost nothing early. All reach alpha at f = 1."""
    f = min(max(fraction, 0.0), 1.0)
    if spending == "pocock":
        return alpha * math.log(1 + (math.e - 1) * f)
    if spending == "linear":
        return alpha * f
    if spending == "obrien_fleming":
        from scipy.stats import norm

        return 0.0 if f == 0 else float(2 - 2 * norm.cdf(norm.ppf(1 - alpha / 2) / math.sqrt(f)))
    raise ValueError(f"unknown spending function {spending!r}; choose one of {', '.join(SPENDING)}")


def look_levels(looks: tuple[int, ...], n_total: int, alpha: float, spending: str) -> tuple[float, ...]:
    """The level of each look: the spending function's increments over the interim looks.

    The look at n_total needs no level (the full set is known exactly: level 0), so all of alpha is
    spent over the looks before it, with information fraction n / (last interim look)."""
    interim = [n for n in looks if n < n_total]
    if not interim:
        return tuple(0.0 for _ in looks)
    last = interim[-1]
    levels, before = [], 0.0
    for n in looks:
        now = spent(n / last, alpha, spending) if n < n_total else before
        levels.append(max(0.0, now - before))
        before = now
    return tuple(levels)


# ---- 0/1 scores: exact hypergeometric -------------------------------------------------------


@lru_cache(maxsize=4096)
def critical_counts(
    n_total: int, good_needed: int, looks: tuple[int, ...], levels: tuple[float, ...]
) -> tuple[int, ...]:
    """Per look, the largest count of 1s among the first n items that rejects "the full set holds
    at least good_needed 1s" (-1: no count rejects).

    A count rejects when its hypergeometric lower tail at the boundary population (exactly
    good_needed 1s, the least favourable: more 1s only make low counts rarer) is <= the look's
    level, or when even all remaining items cannot reach good_needed (certain)."""
    from scipy.stats import hypergeom

    out = []
    for n, level in zip(looks, levels):
        certain = good_needed - (n_total - n) - 1
        counts = np.arange(n + 1)
        tail = (
            hypergeom.cdf(counts, n_total, min(good_needed, n_total), n) if good_needed <= n_total else np.zeros(n + 1)
        )
        below = counts[tail <= level]
        out.append(int(max(certain, below.max() if below.size else -1)))
    return tuple(out)


def rejection_probability(n_total: int, ones: int, looks: tuple[int, ...], critical: tuple[int, ...]) -> float:
    """Exact probability, over the random order, that a full set holding `ones` 1s is rejected at
    some look (count <= critical count): the counts at successive looks form a Markov chain whose
    steps are hypergeometric draws from the unseen items."""
    from scipy.stats import hypergeom

    alive = np.zeros(n_total + 1)
    alive[0] = 1.0  # probability of each count at the previous look, among orders not yet rejected
    rejected, before = 0.0, 0
    for n, crit in zip(looks, critical):
        step, unseen = n - before, n_total - before
        now = np.zeros(n_total + 1)
        for s in np.nonzero(alive)[0]:
            gained = np.arange(step + 1)
            now[s + gained] += alive[s] * hypergeom.pmf(gained, unseen, ones - s, step)
        rejected += now[: crit + 1].sum() if crit >= 0 else 0.0
        now[: max(crit + 1, 0)] = 0.0
        alive, before = now, n
    return float(rejected)


def binary_upper(ones: int, n: int, n_total: int, level: float) -> int:
    """Largest count of 1s in the full set still consistent with `ones` in the first n at `level`:
    the largest M whose hypergeometric lower tail P(S <= ones) exceeds it (all M >= ones are
    possible, up to ones + the unseen items)."""
    from scipy.stats import hypergeom

    candidates = np.arange(ones, ones + n_total - n + 1)
    if level <= 0:
        return int(candidates[-1])
    tail = hypergeom.cdf(ones, n_total, candidates, n)
    kept = candidates[tail > level]
    return int(kept.max()) if kept.size else ones


# ---- scores in [0, 1]: betting without replacement ------------------------------------------


def _conditional_means(y: np.ndarray, mean: float, n_total: int) -> np.ndarray:
    """E[y_i | first i-1 items] if the full set's mean is `mean`: the unseen items' mean."""
    n = y.shape[-1]
    before = np.concatenate([np.zeros(y.shape[:-1] + (1,)), np.cumsum(y, axis=-1)[..., :-1]], axis=-1)
    return (n_total * mean - before) / (n_total - np.arange(n))


def bets(y: np.ndarray, target: float, n_total: int) -> np.ndarray:
    """Predictable stakes against "the full-set mean is >= target" (rows: independent sequences).

    A Kelly-style plug-in: the estimated gap g between the null's conditional mean and the running
    mean, staked as g / (variance + g^2), clipped to [0, BET_CAP]. Uses items before i only."""
    n = y.shape[-1]
    seen = np.arange(n)
    before = np.concatenate([np.zeros(y.shape[:-1] + (1,)), np.cumsum(y, axis=-1)[..., :-1]], axis=-1)
    before_sq = np.concatenate([np.zeros(y.shape[:-1] + (1,)), np.cumsum(y * y, axis=-1)[..., :-1]], axis=-1)
    running = (0.5 + before) / (1 + seen)  # shrunk towards 1/2 so the first bets stay small
    variance = (0.25 + before_sq - 2 * running * before + seen * running**2) / (1 + seen)
    gap = _conditional_means(y, target, n_total) - running
    return np.clip(gap / (variance + gap**2), 0.0, BET_CAP)


def log_capital(y: np.ndarray, mean: float, stakes: np.ndarray, n_total: int) -> np.ndarray:
    """Running log-wealth of betting `stakes` that each item falls below its conditional mean
    under "the full-set mean is `mean`". A nonnegative martingale under that mean (every factor is
    >= 1 - BET_CAP for a feasible mean), so by Ville P(ever >= log 1/alpha) <= alpha."""
    factors = 1 + stakes * (_conditional_means(y, mean, n_total) - y)
    return np.cumsum(np.log(np.maximum(factors, 1e-300)), axis=-1)


def betting_upper(y: np.ndarray, target: float, n_total: int, alpha: float, tol: float = 1e-6) -> float:
    """Anytime upper bound on the full-set mean from one sequence y (the stakes are those placed
    against `target`): the least feasible mean whose wealth has reached 1/alpha, found by bisection
    (wealth grows with the mean tested, so the rejected means form an upper interval)."""
    n = y.size
    low, high = float(y.sum()) / n_total, (float(y.sum()) + n_total - n) / n_total  # feasible range
    stakes = bets(y, target, n_total)
    threshold = math.log(1 / alpha)

    def rejected(mean: float) -> bool:
        return bool(log_capital(y, mean, stakes, n_total).max() >= threshold)

    if not rejected(high):
        return high
    while high - low > tol:
        mid = (low + high) / 2
        low, high = (low, mid) if rejected(mid) else (mid, high)
    return high
