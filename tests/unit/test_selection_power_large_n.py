"""Issue 50, point 1: the non-inferiority power above EXACT_MAX_N items (250) is exact for Tango's
interval, not a Wald normal approximation whose standard error vanished with the flips (identical
answers at 251 items were "shown within 0.02 points" where Tango's interval reaches -1.5; a 1-point
margin "needed" 251 items). Each figure is checked against Tango's interval itself: its lower end
for identical answers (tango_interval of the table (0, 0), and the closed form z^2 / (n + z^2)), and
the power summed over every paired table by brute force."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import gammaln, xlogy
from scipy.stats import norm

from selector.config import PolicyConfig
from selector.selection import power, select
from selector.stats_paired import tango_interval, tango_scores
from tests.factories import GB, hits, run_record, task_result

Z = float(norm.ppf(0.975))
STEP = 1 / 4096  # detectable_margin's bisection: 12 halvings of [0, 1], the upper end returned


def identical(n: int) -> float:
    """How far below 0 Tango's 95% interval of n identical 0/1 answers reaches."""
    low = -tango_interval(0, 0, n, 0.95)[0]
    assert low == pytest.approx(Z**2 / (n + Z**2), abs=1e-9)  # the score statistic at (0, 0): sqrt(n m / (1 - m))
    return low


def tango_power_by_every_table(margin: float, n: int, discordance: float) -> float:
    """P(Tango's lower end >= -margin) for a truly equal variant, summed over every (gained, lost)."""
    i, j = np.triu_indices(n + 1)
    gained, lost = i, j - i
    half = discordance / 2
    log_prob = (gammaln(n + 1) - gammaln(gained + 1) - gammaln(lost + 1) - gammaln(n - gained - lost + 1)
                + xlogy(gained, half) + xlogy(lost, half) + xlogy(n - gained - lost, 1 - discordance))  # fmt: skip
    return float(np.exp(log_prob[tango_scores(gained, lost, n, -margin) >= Z - 1e-9]).sum())


@pytest.mark.parametrize("n", [250, 251, 400, 1000])
def test_identical_answers_are_shown_within_tangos_interval_on_either_side_of_the_switch(n) -> None:
    """Before: 0.0154 at 250 items, 0.0002 at 251, 400 and 1000. At 250 the check's exact test adds
    a little (1.54 instead of 1.51 points); above, Tango's figure to the bisection's step."""
    best = power.detectable_margin(n, 0.95, True, 0.0)
    assert identical(n) - 1e-9 <= best <= identical(n) + (3e-4 if n <= power.EXACT_MAX_N else STEP)


def test_no_jump_at_the_switch() -> None:
    at_250, at_251 = power.detectable_margin(250, 0.95, True, 0.0), power.detectable_margin(251, 0.95, True, 0.0)
    assert at_251 > 0.015 and abs(at_250 - at_251) < 3e-4
    assert power.ni_power(0.0150, 251, 0.95, 0.0) == 0.0 and power.ni_power(0.0151, 251, 0.95, 0.0) == 1.0


@pytest.mark.parametrize("n", [251, 300])
@pytest.mark.parametrize("discordance", [0.0, 1e-4, 0.002, 0.02, 0.1, 0.3])
def test_the_power_above_the_switch_is_tangos_over_every_table(n, discordance) -> None:
    for margin in (0.005, 0.0151, 0.03, 0.06, 0.1):
        assert power.ni_power(margin, n, 0.95, discordance) == pytest.approx(
            tango_power_by_every_table(margin, n, discordance), abs=1e-10)


@pytest.mark.parametrize("n", [251, 400, 1000])
def test_a_few_flips_are_never_better_than_identical_answers(n) -> None:
    """Near-zero discordance (one expected flip in n, or fewer) reads no better than none, and more
    flips only widen it; the Wald figure put 1e-4 at 251 items at 0.56 points."""
    figures = [power.detectable_margin(n, 0.95, True, d) for d in (0.0, 1e-4, 1 / n, 0.01, 0.1)]
    assert figures == sorted(figures)
    assert figures[0] == pytest.approx(identical(n), abs=STEP)
    assert figures[1] >= identical(n) and figures[2] > identical(n)


def test_items_needed_for_a_1_point_margin_with_identical_answers() -> None:
    """Before: 251. Tango's interval of identical answers is within 1 point from 381 items on
    (z^2 (1 - m) / m = 380.3), and detectable_margin agrees on either side."""
    needed = power.items_needed(0.01, 0.95, True, 0.0)
    assert needed == int(np.ceil(Z**2 * 0.99 / 0.01)) == 381
    assert identical(needed) <= 0.01 < identical(needed - 1)
    assert power.ni_power(0.01, needed, 0.95, 0.0) == 1.0 and power.ni_power(0.01, needed - 1, 0.95, 0.0) == 0.0
    assert power.detectable_margin(needed, 0.95, True, 0.0) <= 0.01 + STEP
    assert power.detectable_margin(needed - 1, 0.95, True, 0.0) > 0.01
    assert power.items_needed(0.01, 0.95, True, 0.1) > 5000  # at 10% flipping far more


@pytest.mark.parametrize("n, margin", [(251, 0.015), (300, 0.005), (1000, 0.003)])
def test_the_preflight_says_a_margin_cannot_be_met_above_250_items(n, margin) -> None:
    """Below Tango's interval of identical answers at the eval set's full size: before, never said."""
    assert margin < identical(n)
    [line] = power.preflight_lines(PolicyConfig(rule="non_inferiority", default_margin=margin), {"big": (n, True)})
    assert line.startswith(f"big: the {100 * margin:.1f}-point non-inferiority margin cannot be met with its {n} items")
    assert f"shown within {100 * identical(n):.1f} points at best" in line and "policy.margins.big" in line
    assert "\n" not in line


def test_the_preflight_says_when_a_margin_is_detectable_only_with_low_power_above_250_items() -> None:
    [line] = power.preflight_lines(PolicyConfig(rule="non_inferiority", default_margin=0.02), {"big": (1000, True)})
    detectable = power.detectable_margin(1000, 0.95, True, 0.1)
    assert f"only from {100 * detectable:.1f} points at 1000 items when 10% of answers flip" in line
    assert power.preflight_lines(PolicyConfig(rule="non_inferiority", default_margin=0.05), {"big": (1000, True)}) == []


def test_the_verdict_reads_the_winners_own_flips_unrounded() -> None:
    """One flip in 300 items: rounded to two decimals it read as identical answers."""
    ref = run_record("big", "bf16", [task_result("t", hits(240, 300))], params=10**10, weight_bytes=20 * GB)
    flipped = run_record("m", "int8", [task_result("t", hits(239, 300))], params=10**9, weight_bytes=GB)
    s = select([ref, flipped], PolicyConfig(rule="non_inferiority", default_margin=0.05))
    assert s.winner == "m/int8"
    [row] = s.power
    assert row["discordance"] == 1 / 300
    assert row["detectable"] == power.detectable_margin(300, 0.95, True, 1 / 300) > row["identical"]
    assert "0.3% of answers flipping" in s.power_note
