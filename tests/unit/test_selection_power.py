"""What a verdict can tell apart at the eval set's size (issue 36, points 3, 4 and 6): the point
rule's risk, the minimum detectable effect of lower_bound and of non-inferiority, the preflight's
warning, and the report's figures at the policy's confidence. Each figure is checked against the
decision itself (select() or its checks) summed over every count or paired table."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from scipy.special import gammaln, xlogy
from scipy.stats import binom

from selector.config import PolicyConfig
from selector.selection import power, select
from selector.selection.checks import non_inferiority_check
from selector.selection.evidence import Evidence, paired_diff
from selector.stats import clopper_pearson_interval, wilson_interval
from tests.factories import GB, hits, run_record, task_result


def one(right: int, n: int, model: str = "m", precision: str = "int8", task: str = "t", weight_gb: float = 1.0):
    return run_record(model, precision, [task_result(task, hits(right, n))], params=int(weight_gb * 10**9),
                      weight_bytes=int(weight_gb * GB))


def passes_by_select(n: int, truth: float, floor: float, **rule) -> float:
    """P(select() passes a variant truly at `truth`), summed over every count."""
    pol = PolicyConfig(floors={"t": floor}, **rule)
    return sum(binom.pmf(k, n, truth) for k in range(n + 1) if select([one(k, n)], pol).winner is not None)


# ---- point 4: the point rule's risk, as the report prints it ----


@pytest.mark.parametrize("n", [24, 48, 100])
@pytest.mark.parametrize("rule", [{"rule": "point"}, {"rule": "lower_bound"}, {"rule": "lower_bound", "ci_method": "wilson"}])
def test_the_pass_chance_is_select_itself_summed_over_every_count(n, rule) -> None:
    figure = power.pass_chance(rule["rule"], 0.55, 0.60, n, 0.95, rule.get("ci_method", "exact"))
    assert figure == pytest.approx(passes_by_select(n, 0.55, 0.60, **rule), abs=1e-12)


def test_the_issues_figures_for_rule_point_at_48_items() -> None:
    """At 48 items and a 60% floor a variant truly at 55% passes rule point 27% of the time (50%: 9.7%)."""
    assert power.pass_chance("point", 0.55, 0.60, 48) == pytest.approx(0.2724, abs=1e-4)
    assert power.pass_chance("point", 0.50, 0.60, 48) == pytest.approx(0.0967, abs=1e-4)
    assert power.pass_chance("lower_bound", 0.55, 0.60, 48) < 0.005


def test_the_verdict_states_the_winners_risk_per_floor_and_points_to_the_stricter_rules() -> None:
    s = select([one(40, 48, task="t"), one(48, 48, model="big", precision="bf16", weight_gb=2)],
               PolicyConfig(floors={"t": 0.6}))
    assert s.winner == "m/int8"
    assert "a variant truly 5 points below a floor would pass it with probability t 27% (48 items, floor 60%" in \
        s.power_note
    assert "policy.rule=lower_bound" in s.power_note and "fixed_sequence" in s.power_note
    [row] = s.power
    assert row["passes_below"] == pytest.approx(0.2724, abs=1e-4) and row["gap"] == 0.05
    narrower = select([one(40, 48, task="t")], PolicyConfig(floors={"t": 0.6}, margins={"t": 0.10}))
    assert "10 points below" in narrower.power_note  # the policy's own margin is the gap


def test_truth_to_pass_is_where_the_pass_chance_reaches_80_percent() -> None:
    need = power.truth_to_pass("lower_bound", 0.6, 48)
    assert need == pytest.approx(0.7885, abs=1e-3)
    assert power.pass_chance("lower_bound", need, 0.6, 48) == pytest.approx(0.8, abs=1e-6)
    assert power.truth_to_pass("lower_bound", 1.0, 48) is None  # no count of 48 passes a 100% floor


# ---- point 3: non-inferiority's minimum detectable margin ----


def declared_by_the_check(n: int, margin: float, discordance: float) -> float:
    """P(the selection's non-inferiority check passes) for a truly equal variant, over every table."""
    total, p = 0.0, discordance / 2
    for gained in range(n + 1):
        for lost in range(n + 1 - gained):
            prob = float(np.exp(gammaln(n + 1) - gammaln(gained + 1) - gammaln(lost + 1) - gammaln(n - gained - lost + 1)
                                + xlogy(gained, p) + xlogy(lost, p) + xlogy(n - gained - lost, 1 - discordance)))
            if prob < 1e-12:
                continue
            v = np.r_[np.ones(gained), np.zeros(lost), np.ones(n - gained - lost)]
            r = np.r_[np.zeros(gained), np.ones(lost), np.ones(n - gained - lost)]
            a, b = task_result("t", v), task_result("t", r)
            ev = Evidence(one(0, 1), paired={"t": paired_diff(a, b, 0.95, 0, 0)})
            ev.record.tasks["t"] = a
            total += prob * non_inferiority_check(ev, "t", margin, "ref", 0.95).passed
    return total


@pytest.mark.parametrize("n, margin, discordance", [(24, 0.15, 0.1), (48, 0.05, 0.1), (48, 0.10, 0.2)])
def test_non_inferiority_power_is_the_check_itself_over_every_table(n, margin, discordance) -> None:
    assert power.ni_power(margin, n, 0.95, discordance) == pytest.approx(declared_by_the_check(n, margin, discordance),
                                                                          abs=1e-9)


def test_the_issues_figures_for_non_inferiority_at_48_items() -> None:
    """Two identical 0/1 variants: about +/-7.4 points at 48 items, so a 5-point margin cannot be
    shown; a truly equal variant passes 0-12% of the time; identical fractional scores: 9.8 points."""
    best = power.detectable_margin(48, 0.95, True, 0.0)
    assert 0.074 < best < 0.076
    assert [round(power.ni_power(0.05, 48, 0.95, d), 3) for d in (0.0, 0.05, 0.10, 0.20)] == [0.0, 0.116, 0.121, 0.091]
    assert power.detectable_margin(48, 0.95, False, 0.0) == pytest.approx(0.0983, abs=5e-4)
    identical = [one(40, 48), one(40, 48, model="big", precision="bf16", weight_gb=2)]
    below = PolicyConfig(rule="non_inferiority", default_margin=best - 0.002)
    above = PolicyConfig(rule="non_inferiority", default_margin=best + 0.002)
    assert select(identical, below).winner == "big/bf16" and select(identical, above).winner == "m/int8"


def test_items_needed_for_a_margin_with_identical_answers() -> None:
    needed = power.items_needed(0.05, 0.95, True, 0.0)
    assert power.ni_power(0.05, needed, 0.95, 0.0) == 1.0 and power.ni_power(0.05, needed - 1, 0.95, 0.0) == 0.0


def test_the_verdict_carries_the_detectable_margin_at_the_winners_own_discordance() -> None:
    ref = run_record("big", "bf16", [task_result("t", hits(40, 48))], params=10**10, weight_bytes=20 * GB)
    flipped = run_record("m", "int8", [task_result("t", hits(40, 48, offset=3))], params=10**9, weight_bytes=GB)
    s = select([ref, flipped], PolicyConfig(rule="non_inferiority", default_margin=0.25))
    assert s.winner == "m/int8"
    [row] = s.power
    assert row["discordance"] == pytest.approx(6 / 48, abs=0.01)  # 3 items each way
    assert row["detectable"] == pytest.approx(power.detectable_margin(48, 0.95, True, 0.12), abs=1e-9)
    assert "Minimum detectable margin" in s.power_note and "12% of answers flipping" in s.power_note


def test_the_preflight_says_when_the_margin_cannot_be_met(caplog) -> None:
    from selector.sweep.preflight import power_notices
    from tests.factories import selector_config

    from selector.paths import DEFAULT_EVALSET

    cfg = selector_config("/nonexistent")
    cfg.evalset.path = str(DEFAULT_EVALSET)
    cfg.policy = PolicyConfig(rule="non_inferiority", default_margin=0.05)
    with caplog.at_level(logging.WARNING):
        lines = power_notices(cfg)
    arithmetic = next(line for line in lines if line.startswith("arithmetic:"))
    assert "the 5.0-point non-inferiority margin cannot be met with its 48 items" in arithmetic
    assert "shown within 7.5 points at best" in arithmetic and "policy.margins.arithmetic" in arithmetic
    assert "items for 80% power" in arithmetic and arithmetic in caplog.text
    cfg.policy = PolicyConfig(rule="non_inferiority", default_margin=0.30)
    assert power_notices(cfg) == []
    cfg.policy = PolicyConfig(rule="lower_bound", floors={"arithmetic": 1.0})
    [line] = power_notices(cfg)
    assert "no result on its 48 items can pass the 100% floor under rule lower_bound" in line


# ---- point 6: the report at the policy's confidence, the sample size of fractional scores ----


def test_the_report_says_the_policys_confidence_and_flags_at_its_level() -> None:
    from selector.report import statistics_view, view

    ref = one(46, 48, model="big", precision="bf16", weight_gb=2)
    s = select([ref, one(30, 48)], PolicyConfig(floors={"t": 0.5}, confidence=0.9))
    assert view.ci_label(s) == "90% CI"
    assert "[90% CI]" in view.variant_table([ref, one(30, 48)], s).note
    assert statistics_view.flag_alpha(s) == pytest.approx(0.1)
    assert "Holm-adjusted p < 0.1" in statistics_view.paired_table([ref, one(30, 48)], s).note
    table = statistics_view.power_table(s)
    assert table is not None and table.rows[0][0].text == "t"


def test_sample_size_for_fractional_scores_reads_the_raw_differences() -> None:
    """F1-like scores both under 0.5: McNemar's formula on a 0.5 cut called them indistinguishable."""
    a = run_record("a", "int8", [task_result("t", [0.40] * 40, metric="f1")], params=10**9, weight_bytes=GB)
    b = run_record("b", "int4", [task_result("t", [0.30] * 20 + [0.40] * 20, metric="f1")], params=10**9,
                   weight_bytes=GB // 2)
    s = select([a, b], PolicyConfig(floors={"t": 0.2}))
    [row] = s.sample_size
    assert row["method"] == "paired (mean difference)" and row["needed"] is not None
    d = np.r_[np.full(20, 0.1), np.zeros(20)] * -1  # the winner b minus a
    z = 1.959964 + 0.841621
    assert row["needed"] == int(np.ceil((z * d.std(ddof=1) / d.mean()) ** 2))


# ---- point 6: the figures the docs now give ----


def worst_above(n: int, interval) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """The largest P(lower end > p) over p in 0.001 ... 0.999, exactly; and where."""
    grid = np.arange(1, 1000) / 1000
    low = np.array([interval(k, n, 0.95)[0] for k in range(n + 1)])
    above = (binom.pmf(np.arange(n + 1)[None, :], n, grid[:, None]) * (low[None, :] > grid[:, None])).sum(axis=1)
    return float(above.max()), float(grid[above.argmax()])


def test_wilson_runs_over_its_level_and_clopper_pearson_does_not() -> None:
    worst, _ = worst_above(48, clopper_pearson_interval)
    assert worst <= 0.025 + 1e-9
    worst, at = worst_above(48, wilson_interval)
    assert worst == pytest.approx(0.1343, abs=1e-4) and at == pytest.approx(0.003)
    grid_low = np.array([wilson_interval(k, 48, 0.95)[0] for k in range(49)])
    at_p = {p: float(binom.pmf(np.arange(49), 48, p)[grid_low > p].sum()) for p in (0.504, 0.07, 0.011)}
    assert at_p == pytest.approx({0.504: 0.0337, 0.07: 0.0484, 0.011: 0.0980}, abs=1e-4)


def test_a_ceiling_is_read_on_the_mirrored_scale() -> None:
    """An error rate with a 30% ceiling: a variant truly at 35% passes as often as one truly at 65%
    passes a 70% floor (every interval here is symmetric)."""
    policy = PolicyConfig(floors={"err": 0.3})
    [row] = power.rows(policy, {"err": (48, True, False)})
    assert row["passes_below"] == pytest.approx(power.pass_chance("point", 0.65, 0.70, 48))
    assert row["truth_to_pass"] == pytest.approx(1 - power.truth_to_pass("point", 0.70, 48))
    assert "err 2" in power.verdict_note(policy, [row]) and "ceiling 30%, passed 80% of the time up to a true" in \
        power.verdict_note(policy, [row])
