"""Statistics in selector/stats.py: intervals hold their nominal coverage, tests match known values,
sample sizes deliver the power they promise."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom, binomtest, norm

from selector.stats import (
    bootstrap_interval,
    mcnemar_exact,
    newcombe_diff_interval,
    paired_sample_size,
    two_proportion_sample_size,
    wilson_interval,
)


def exact_wilson_coverage(p: float, n: int, confidence: float = 0.95) -> float:
    """P(interval contains p) summed over every binomial outcome: exact, no simulation noise."""
    k = np.arange(n + 1)
    inside = [lo <= p <= hi for lo, hi in (wilson_interval(x, n, confidence) for x in k)]
    return float(binom.pmf(k, n, p)[inside].sum())


# ---- Wilson ----


def test_wilson_known_value():
    low, high = wilson_interval(8, 10)  # textbook: 8/10 at 95% -> [0.4902, 0.9433]
    assert low == pytest.approx(0.4902, abs=1e-4)
    assert high == pytest.approx(0.9433, abs=1e-4)


def test_wilson_edges_stay_in_unit_interval():
    assert wilson_interval(0, 20)[0] == 0.0 and wilson_interval(0, 20)[1] > 0.0
    assert wilson_interval(20, 20)[1] == 1.0 and wilson_interval(20, 20)[0] < 1.0
    assert wilson_interval(0, 0) == (0.0, 1.0)


@pytest.mark.parametrize("n, mean_lo, mean_hi, floor", [
    (40, 0.945, 0.955, 0.925),
    (200, 0.945, 0.955, 0.935),
])  # fmt: skip
def test_wilson_exact_coverage_near_nominal(n, mean_lo, mean_hi, floor):
    """Measured: n=40 mean 0.9500 (min 0.928), n=200 mean 0.9504 (min 0.938) over p in [0.05, 0.95]."""
    coverage = [exact_wilson_coverage(p, n) for p in np.linspace(0.05, 0.95, 91)]
    assert mean_lo <= float(np.mean(coverage)) <= mean_hi
    assert min(coverage) >= floor


@pytest.mark.slow  # property-based: many generated cases (the full suite runs it)
@settings(max_examples=25, deadline=None)
@given(p=st.floats(0.05, 0.95), n=st.sampled_from([40, 200]), seed=st.integers(0, 2**16))
def test_wilson_simulated_coverage(p, n, seed):
    """Simulated draws: the share of intervals containing the true p is near 95%."""
    rng = np.random.default_rng(seed)
    hits = [lo <= p <= hi for lo, hi in (wilson_interval(k, n) for k in rng.binomial(n, p, size=1500))]
    assert 0.90 <= np.mean(hits) <= 0.99  # 1500 draws: sd of the estimate ~0.6 points


@settings(max_examples=50, deadline=None)
@given(k=st.integers(0, 300), extra=st.integers(0, 300), c1=st.floats(0.5, 0.9), c2=st.floats(0.9, 0.999))
def test_wilson_contains_estimate_and_widens_with_confidence(k, extra, c1, c2):
    n = k + extra
    if n == 0:
        return
    lo1, hi1 = wilson_interval(k, n, c1)
    lo2, hi2 = wilson_interval(k, n, c2)
    assert lo1 - 1e-12 <= k / n <= hi1 + 1e-12
    assert lo2 <= lo1 + 1e-12 and hi2 >= hi1 - 1e-12


# ---- bootstrap ----


def test_bootstrap_is_deterministic_and_seed_dependent():
    scores = [1, 0, 1, 1, 0, 1, 0, 1, 1, 1] * 5
    assert bootstrap_interval(scores, 0.95, 500, seed=3) == bootstrap_interval(scores, 0.95, 500, seed=3)
    assert bootstrap_interval(scores, 0.95, 500, seed=3) != bootstrap_interval(scores, 0.95, 500, seed=4)


def test_bootstrap_matches_normal_theory_on_a_large_sample():
    rng = np.random.default_rng(0)
    scores = rng.binomial(1, 0.7, size=2000).astype(float)
    low, high = bootstrap_interval(scores, 0.95, 4000, seed=0)
    half = 1.96 * scores.std() / math.sqrt(scores.size)
    assert low == pytest.approx(scores.mean() - half, abs=0.004)
    assert high == pytest.approx(scores.mean() + half, abs=0.004)


def test_bootstrap_constant_data_and_bad_input():
    assert bootstrap_interval([1.0] * 7) == (1.0, 1.0)
    with pytest.raises(ValueError):
        bootstrap_interval([])
    with pytest.raises(ValueError):
        bootstrap_interval([0.0, 1.0], confidence=1.5)


def test_paired_bootstrap_covers_true_difference_at_nominal_rate():
    """Paired binary scores with a known mean difference (-0.05): the 95% interval on per-item
    differences contains it in about 95% of simulated eval sets (measured: 0.960 over 400)."""
    rng = np.random.default_rng(1)
    # joint outcomes (ref right, variant right): p11, p10, p01, p00 -> true diff = p01 - p10
    probs = np.array([0.70, 0.10, 0.05, 0.15])
    true_diff = probs[2] - probs[1]
    hits = 0
    reps = 400
    for rep in range(reps):
        outcome = rng.choice(4, size=120, p=probs)
        ref = np.isin(outcome, (0, 1)).astype(float)
        var = np.isin(outcome, (0, 2)).astype(float)
        low, high = bootstrap_interval(var - ref, 0.95, 1000, seed=rep)
        hits += low <= true_diff <= high
    assert 0.91 <= hits / reps <= 0.98


# ---- McNemar ----


@pytest.mark.parametrize("b, c, expected", [
    (1, 9, 22 / 1024),  # 2 * P(X <= 1 | 10, 1/2) = 2 * 11 / 1024
    (2, 8, 112 / 1024),  # 2 * (1 + 10 + 45) / 1024
    (0, 5, 2 / 32),
    (5, 5, 1.0),
    (0, 0, 1.0),  # no discordant pairs: no evidence of a difference
])  # fmt: skip
def test_mcnemar_known_values(b, c, expected):
    assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-12)


@settings(max_examples=100, deadline=None)
@given(b=st.integers(0, 80), c=st.integers(0, 80))
def test_mcnemar_matches_scipy_binomtest_and_is_symmetric(b, c):
    p = mcnemar_exact(b, c)
    assert p == mcnemar_exact(c, b)
    if b + c:
        assert p == pytest.approx(binomtest(b, b + c, 0.5).pvalue, rel=1e-9, abs=1e-15)


def test_mcnemar_rejects_negative_counts():
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 3)


# ---- Newcombe ----


def test_newcombe_matches_published_example():
    # Newcombe (1998), Statistics in Medicine 17:873, example (a): 56/70 vs 48/80, method 10
    low, high = newcombe_diff_interval(56 / 70, 70, 48 / 80, 80)
    assert low == pytest.approx(0.0524, abs=1e-4)
    assert high == pytest.approx(0.3339, abs=1e-4)


# ---- sample sizes ----


def test_two_proportion_sample_size_known_value_and_edges():
    assert two_proportion_sample_size(0.6, 0.4) == pytest.approx(96.92, abs=0.01)  # Fleiss, no cc
    assert two_proportion_sample_size(0.4, 0.6) == two_proportion_sample_size(0.6, 0.4)
    assert math.isinf(two_proportion_sample_size(0.7, 0.7))
    assert two_proportion_sample_size(0.9, 0.8) < two_proportion_sample_size(0.9, 0.85)


def test_two_proportion_sample_size_delivers_its_power():
    p1, p2 = 0.85, 0.70
    n = math.ceil(two_proportion_sample_size(p1, p2))
    rng = np.random.default_rng(0)
    x1, x2 = rng.binomial(n, p1, 4000), rng.binomial(n, p2, 4000)
    pooled = (x1 + x2) / (2 * n)
    z = (x1 - x2) / n / np.sqrt(pooled * (1 - pooled) * 2 / n)
    power = np.mean(np.abs(z) > norm.ppf(0.975))
    assert 0.76 <= power <= 0.85


def test_paired_sample_size_known_value_and_power():
    assert paired_sample_size(0.2, 0.1) == pytest.approx(233.09, abs=0.01)  # Connor (1987)
    assert math.isinf(paired_sample_size(0.1, 0.1))
    n = math.ceil(paired_sample_size(0.2, 0.1))
    rng = np.random.default_rng(0)
    counts = rng.multinomial(n, [0.2, 0.1, 0.7], size=3000)
    b, c = counts[:, 0], counts[:, 1]
    p = np.minimum(1.0, 2 * binom.cdf(np.minimum(b, c), b + c, 0.5))  # McNemar exact, vectorized
    power = np.mean(p < 0.05)
    assert 0.72 <= power <= 0.86  # the exact test is a little conservative
