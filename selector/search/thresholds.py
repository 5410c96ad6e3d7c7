"""What the full evaluation of a task must reach for the policy's rule to pass it.

Early rejection answers "would the FULL evaluation (all N items) of this task pass under the
policy's rule?". Each rule is reduced to a threshold t on the full-set mean m_N such that passing
implies m_N >= t (a ceiling m_N <= t when lower is better):

- point: the floor itself, with the selection's float tolerance (EPS).
- lower_bound, Wilson (for fractional scores too, as selector.stats.mean_interval judges them):
  the full-set Wilson lower bound grows with m_N, so pass <=> m_N >= t with t the least full-set
  mean whose bound clears the floor (k/N for 0/1 scores: exact).
- lower_bound, exact (Clopper-Pearson on the score sum, for 0/1 and fractional scores alike): the
  same search with that interval.
- lower_bound, bootstrap: no exact map; the percentile interval's low end lies below the point
  estimate (it does whenever more than alpha/2 of the resampled means do, around half of them on
  any realistic eval set), so m_N < floor already fails: t = floor (conservative).
- non_inferiority: on the paired differences d_i = x_i - r_i, t = -margin; the bootstrap interval's
  low end lies below the mean difference, so m_N(d) < -margin fails (conservative too).
"""

from __future__ import annotations

import math

from selector.stats import clopper_pearson_interval, wilson_interval

EPS = 1e-9  # the selection's tolerance (selector.selection.checks.EPS): 18/30 meets a 0.6 floor


def point_threshold(floor: float, n_total: int, higher_is_better: bool, binary: bool) -> float:
    """m_N >= floor - EPS (<= floor + EPS when lower is better); for 0/1 scores the achievable k/N."""
    if not binary:
        return floor - EPS if higher_is_better else floor + EPS
    if higher_is_better:
        return _least(lambda k: k / n_total >= floor - EPS, n_total)
    return _most(lambda k: k / n_total <= floor + EPS, n_total)


def wilson_threshold(floor: float, n_total: int, confidence: float, higher_is_better: bool, binary: bool,
                     interval=wilson_interval) -> float:  # type: ignore[no-untyped-def]
    """The least full-set mean whose Wilson lower bound at n_total clears the floor (for a ceiling:
    the largest whose upper bound stays under it), computed the way the selection computes it.

    nan when no full-set result can pass (a floor of 100% under lower_bound, say)."""

    def passes(mean: float) -> bool:
        low, high = interval(mean * n_total, n_total, confidence)
        return low >= floor - EPS if higher_is_better else high <= floor + EPS

    if binary:
        find = _least if higher_is_better else _most
        return find(lambda k: passes(k / n_total), n_total)
    # Fractional means: bisect on [0, 1] and keep the side that cannot pass (conservative).
    inside, outside = (1.0, 0.0) if higher_is_better else (0.0, 1.0)
    if not passes(inside):
        return math.nan
    if passes(outside):
        return outside
    for _ in range(60):
        mid = (inside + outside) / 2
        inside, outside = (mid, outside) if passes(mid) else (inside, mid)
    return outside


def full_set_threshold(
    rule: str, floor: float, n_total: int, *, higher_is_better: bool = True, binary: bool = True,
    confidence: float = 0.95, ci_method: str = "exact",
) -> float:  # fmt: skip
    """Threshold on the full-set mean for an accuracy floor under `rule` (see the module doc)."""
    if rule == "lower_bound" and ci_method == "wilson":
        return wilson_threshold(floor, n_total, confidence, higher_is_better, binary)
    if rule == "lower_bound" and ci_method == "exact":  # Clopper-Pearson, as selector.stats.mean_interval
        return wilson_threshold(floor, n_total, confidence, higher_is_better, binary, clopper_pearson_interval)
    if rule in ("point", "lower_bound", "non_inferiority"):  # non_inferiority's floors are point checks
        return point_threshold(floor, n_total, higher_is_better, binary)
    raise ValueError(f"unknown rule {rule!r}")


def _least(passes, n_total: int) -> float:
    """k/N for the least k in 0..N that passes (passing is monotone in k); nan when none does."""
    lo, hi = 0, n_total + 1  # passes(hi) stands for "none"
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if passes(mid) else (mid + 1, hi)
    return lo / n_total if lo <= n_total else math.nan


def _most(passes, n_total: int) -> float:
    """k/N for the largest k in 0..N that passes (passing shrinks as k grows); nan when none does."""
    found = _least(lambda k: not passes(k), n_total)
    k = n_total + 1 if math.isnan(found) else round(found * n_total)
    return (k - 1) / n_total if k >= 1 else math.nan
