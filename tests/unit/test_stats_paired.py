"""Paired statistics (selector/stats_paired.py): Tango's interval inverts its score test, the exact
test keeps its level at the margin where Tango alone does not, Holm adjusts as the textbook does,
and fractional scores get a t interval and Wilcoxon's test on their raw values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import gammaln
from scipy.stats import norm, wilcoxon

from selector.stats import mean_interval, wilson_interval
from selector.stats_paired import (
    betting_lower,
    holm,
    noninferiority_exact_p,
    paired_binary,
    paired_fractional,
    tango_interval,
    tango_score,
)


def test_tango_interval_inverts_the_score_test():
    z = norm.ppf(0.975)
    for gained, lost, n in ((1, 3, 48), (0, 2, 100), (5, 5, 40), (0, 0, 48), (12, 2, 60)):
        low, high = tango_interval(gained, lost, n)
        assert low <= (gained - lost) / n <= high
        if low > -1:
            assert tango_score(gained, lost, n, low) == pytest.approx(z, abs=1e-6)
        if high < 1:
            assert tango_score(gained, lost, n, high) == pytest.approx(-z, abs=1e-6)
    assert tango_interval(0, 48, 48)[0] == -1.0 and tango_interval(48, 0, 48)[1] == 1.0
    # no discordant pair at all still leaves room: 48 items cannot show a 5-point margin
    assert tango_interval(0, 0, 48) == pytest.approx((-0.0741, 0.0741), abs=1e-4)


def _multinomial(n: int, disc: float, margin: float):
    """Every (gained, lost) table with its probability when the true difference is -margin."""
    p_gained, p_lost = (disc - margin) / 2, (disc + margin) / 2
    for g in range(n + 1):
        for lost in range(n + 1 - g):
            log_p = (gammaln(n + 1) - gammaln(g + 1) - gammaln(lost + 1) - gammaln(n - g - lost + 1)
                     + g * math.log(p_gained) + lost * math.log(p_lost) + (n - g - lost) * math.log(1 - disc))  # fmt: skip
            yield g, lost, math.exp(log_p)


def test_at_the_margin_the_shipped_rule_keeps_its_level_where_tango_alone_does_not():
    """n = 42, 48% discordant pairs, true difference exactly -5 points: Tango's interval alone
    declares non-inferiority with probability 2.63% (nominal 2.5%); with the exact test as well,
    below 2.5%. Exact enumeration over every table."""
    n, margin, tango_only, shipped = 42, 0.05, 0.0, 0.0
    for g, lost, p in _multinomial(n, 0.48, margin):
        if p < 1e-12 or tango_interval(g, lost, n)[0] < -margin:
            continue
        tango_only += p
        shipped += p * (noninferiority_exact_p(g, lost, n, margin) <= 0.025)
    assert tango_only == pytest.approx(0.02633, abs=2e-4)
    assert 0.015 < shipped <= 0.025


@pytest.mark.slow  # sums every table directly
def test_exact_p_matches_a_direct_computation():
    """The table-at-once p-values equal a direct sum for one table and one nuisance value."""
    n, margin, g, lost = 30, 0.05, 2, 1
    z_obs = tango_score(g, lost, n, -margin)
    best = 0.0
    for p_lost in np.linspace(margin, (1 + margin) / 2, 402)[1:-1]:
        p_gained = p_lost - margin
        tail = 0.0
        for b in range(n + 1):
            for c in range(n + 1 - b):
                if tango_score(b, c, n, -margin) >= z_obs - 1e-9:
                    tail += math.exp(gammaln(n + 1) - gammaln(b + 1) - gammaln(c + 1) - gammaln(n - b - c + 1)
                                     + b * math.log(p_gained) + c * math.log(p_lost)
                                     + (n - b - c) * math.log(1 - p_gained - p_lost))  # fmt: skip
        best = max(best, tail)
    assert noninferiority_exact_p(g, lost, n, margin) == pytest.approx(best, rel=1e-9)


def test_paired_binary_counts_flips_and_runs_mcnemar():
    v = np.array([1, 1, 0, 0, 1, 0, 1, 1], dtype=float)
    r = np.array([1, 0, 1, 1, 1, 0, 1, 1], dtype=float)
    low, high, to_wrong, to_right, p = paired_binary(v, r, 0.95)
    assert (to_wrong, to_right) == (2, 1) and p == pytest.approx(1.0)
    assert (low, high) == pytest.approx(tango_interval(1, 2, 8))


def test_fractional_differences_use_the_raw_scores():
    rng = np.random.default_rng(1)
    d = rng.uniform(-0.4, 0.3, 48)
    low, high, p = paired_fractional(d, 0.95)
    half = 2.0117 * d.std(ddof=1) / math.sqrt(48)  # Student's t, 47 degrees of freedom: narrower
    assert low < d.mean() - half and d.mean() + half < high and high - low < 4 * half
    assert p == pytest.approx(wilcoxon(d).pvalue)
    low, high, p = paired_fractional(np.zeros(200), 0.95)  # identical scores, 200 items
    assert -0.05 < low < 0 < high < 0.05 and p == 1.0


def test_the_betting_bound_covers_skewed_differences_at_the_margin():
    """Most items unchanged, a few dropping far, true mean exactly -5 points: 2000 draws of 48
    items; the lower end clears -5 points in at most 2.5% of them (Student's t: about 10%)."""
    rng = np.random.default_rng(5)
    hits = 0
    for _ in range(2000):
        d = np.where(rng.random(48) < 0.1, -0.5, 0.0)  # mean -0.05
        hits += betting_lower((d + 1) / 2, 0.025) * 2 - 1 >= -0.05
    assert hits / 2000 <= 0.025


def test_holm_step_down():
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([]) == [] and holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])


def test_one_interval_rule_per_metric():
    """ci_method decides, for 0/1 and fractional scores alike (Wilson on sum / n)."""
    binary = [1.0] * 30 + [0.0] * 18
    assert mean_interval(binary, True, 0.95, "wilson")[:2] == pytest.approx(wilson_interval(30, 48, 0.95))
    assert mean_interval(binary, True, 0.95, "bootstrap")[2] == "bootstrap"
    f1 = list(np.linspace(0.1, 0.9, 48))
    low, high, method = mean_interval(f1, False, 0.95, "wilson")
    assert method == "wilson" and (low, high) == pytest.approx(wilson_interval(sum(f1), 48, 0.95))
    assert mean_interval(f1, False, 0.95, "bootstrap")[2] == "bootstrap"


def test_ci_method_exact_keeps_its_level_where_wilson_does_not():
    """n = 48, p = 0.5: Wilson's lower end lies above p with probability 2.97% (one-sided nominal
    2.5%); Clopper-Pearson's stays under it at every p. Exact binomial sums."""
    from scipy.stats import binom, binomtest

    from selector.stats import clopper_pearson_interval

    def above(interval, n: int, p: float) -> float:
        return sum(binom.pmf(k, n, p) for k in range(n + 1) if interval(k, n, 0.95)[0] > p)

    assert above(wilson_interval, 48, 0.5) == pytest.approx(0.0297, abs=1e-4)
    for n in (42, 48):
        for p in np.linspace(0.05, 0.95, 37):
            assert above(clopper_pearson_interval, n, p) <= 0.025 + 1e-12
    ci = binomtest(30, 48).proportion_ci(0.95, method="exact")
    assert clopper_pearson_interval(30, 48) == pytest.approx((ci.low, ci.high))
    assert mean_interval([1.0] * 30 + [0.0] * 18, True, 0.95, "exact")[2] == "exact"
