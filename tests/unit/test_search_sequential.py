"""Early rejection (selector/search/sequential.py): the bound's false-rejection probability stays
<= alpha over all looks, the thresholds keep each rule's meaning at the full set, and clearly failing
variants stop at the first look."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from selector.search import bounds
from selector.search.sequential import (
    FloorTest,
    TaskSpec,
    evaluation_order,
    floor_tests,
    floor_tests_for_policy,
    planned_looks,
)
from selector.search.thresholds import EPS, full_set_threshold, point_threshold, wilson_threshold
from selector.stats import wilson_interval


def binary_test(n_total: int, floor: float, alpha: float, round_size: int, spending: str = "pocock") -> FloorTest:
    return floor_tests(rule="point", floors={"t": floor}, tasks={"t": TaskSpec(n_total)}, alpha=alpha,
                       round_size=round_size, spending=spending).tests[0]  # fmt: skip


def exact_false_rejection(test: FloorTest, ones: int) -> float:
    crit = bounds.critical_counts(test.n_total, test.good_needed, test.looks, test.levels)
    return bounds.rejection_probability(test.n_total, ones, test.looks, crit)


# ---- coverage: P(reject | the full set passes) <= alpha ----


@settings(max_examples=40, deadline=None)
@given(
    n_total=st.integers(12, 150), floor=st.floats(0.05, 0.95), alpha=st.sampled_from([0.01, 0.05, 0.2, 0.4]),
    round_size=st.integers(3, 30), extra=st.integers(0, 3), spending=st.sampled_from(bounds.SPENDING),
)  # fmt: skip
def test_binary_false_rejection_is_at_most_alpha_exactly(n_total, floor, alpha, round_size, extra, spending):
    """Exact (Markov chain over the looks): a full set at the threshold, or a little above it, is
    rejected with probability <= alpha summed over every look."""
    test = binary_test(n_total, floor, alpha, round_size, spending)
    ones = min(n_total, test.good_needed + extra)
    assert exact_false_rejection(test, ones) <= alpha + 1e-12


def test_binary_spends_most_of_alpha_when_it_can():
    """Not vacuous: at the boundary the exact error is a sizeable part of alpha (a test that never
    rejects would pass the coverage test too)."""
    test = binary_test(200, 0.5, 0.2, 20)
    assert 0.05 < exact_false_rejection(test, test.good_needed) <= 0.2


def test_small_population_enumerated_by_hand():
    """N = 10, every placement of the 1s: decide() on every look agrees with the exact chain, and
    the share of orders it rejects is <= alpha."""
    test = binary_test(10, 0.6, 0.3, 3)
    ones = test.good_needed
    orders = list(itertools.combinations(range(10), ones))
    rejected = 0
    for positions in orders:
        y = np.zeros(10)
        y[list(positions)] = 1
        rejected += any(test.decide(y[:n]).reject for n in test.looks)
    share = rejected / len(orders)
    assert share == pytest.approx(exact_false_rejection(test, ones), abs=1e-12)
    assert 0 < share <= 0.3


def test_decide_matches_critical_counts():
    test = binary_test(60, 0.7, 0.05, 10)
    crit = bounds.critical_counts(test.n_total, test.good_needed, test.looks, test.levels)
    for k, n in enumerate(test.looks):
        for ones in range(n + 1):
            decision = test.decide(np.r_[np.ones(ones), np.zeros(n - ones)])
            assert decision.reject == (ones <= crit[k])
            assert decision.reject == (decision.bound < test.threshold - 1e-12)  # the bound explains it


def test_union_bound_levels_sum_to_alpha():
    levels = bounds.look_levels(planned_looks(100, 12), 100, 0.05, "pocock")
    assert sum(levels) == pytest.approx(0.05)
    assert levels[-1] == 0.0  # the full set is exact
    assert all(a > b for a, b in zip(levels, levels[1:-1]))  # Pocock: front-loaded


@pytest.mark.parametrize("mean_at", ["target", "above"])
def test_fractional_false_rejection_is_at_most_alpha(mean_at):
    """Betting martingale, simulated: token-F1-like scores whose full-set mean is at the threshold
    (the least favourable case) are rejected in at most alpha of 4000 random orders, and decide()
    takes the same decisions. Only the interim looks can reject statistically: at the last look
    the full set is known and meets the threshold, so it never rejects there."""
    rng = np.random.default_rng(7)
    n_total, target, alpha = 80, 0.6, 0.2
    pop = np.where(rng.random(n_total) < 0.5, 1.0, rng.random(n_total))
    pop = np.clip(pop * (target + (0.02 if mean_at == "above" else 0.0)) / pop.mean(), 0, 1)
    pop += (target * n_total - pop.sum()) / n_total if mean_at == "target" else 0.0
    assert pop.mean() >= target - 1e-12
    looks = np.array(planned_looks(n_total, 10))
    interim = looks[looks < n_total]
    seqs = pop[np.argsort(rng.random((4000, n_total)), axis=1)]
    wealth = bounds.log_capital(seqs, target, bounds.bets(seqs, target, n_total), n_total)
    crossed = np.maximum.accumulate(wealth, axis=1) >= math.log(1 / alpha)
    rejected = crossed[:, interim - 1]
    rate = rejected.any(axis=1).mean()
    assert rate <= alpha
    late = crossed[:, -1] & ~rejected.any(axis=1)  # crossed only after the last interim look
    assert late.any() or mean_at == "above"  # at the target: orders the old last look rejected
    test = FloorTest("f1", target - EPS, n_total, alpha, tuple(looks), binary=False, limit=target)
    rows = list(range(20)) + list(np.flatnonzero(late)[:10])
    for row in rows:  # every look, as the evaluation loop calls it
        decisions = [test.decide(seqs[row][:n]).reject for n in looks]
        assert decisions[:-1] == list(rejected[row]) and not decisions[-1]


# The counter-example: a 48-item F1 task, floor 0.6, alpha 0.05 over three floors; 29/48 right.
COUNTER_EXAMPLE = [float(c) for c in "000101110010000010111001101101110110011111111111"]


def counter_example_stopper():
    tasks = {"f1": TaskSpec(48, binary=False), "a": TaskSpec(48), "b": TaskSpec(48)}
    return floor_tests(rule="point", floors=dict.fromkeys(tasks, 0.6), tasks=tasks, alpha=0.05, round_size=12)


def test_a_fractional_task_that_meets_its_floor_on_every_item_is_not_rejected():
    stopper = counter_example_stopper()
    test = next(t for t in stopper.tests if t.task == "f1")
    y = np.array(COUNTER_EXAMPLE)
    assert y.sum() == 29 and test.alpha == pytest.approx(0.05 / 3)
    wealth = bounds.log_capital(y, test.target, bounds.bets(y, test.target, 48), 48)
    threshold = math.log(1 / test.alpha)
    assert wealth[35] == pytest.approx(3.63, abs=0.01) and threshold == pytest.approx(4.09, abs=0.01)
    assert wealth[36] >= threshold  # the wealth crosses at item 37, after the look at 36
    assert not test.decide(y[:36]).reject
    final = test.decide(y)
    assert not final.reject and final.level == 1.0 and final.bound == pytest.approx(29 / 48)
    assert final.reason == "f1: all 48 items seen: mean 60.4% over 48 items >= floor 60.0%"
    assert stopper.check({"f1": COUNTER_EXAMPLE, "a": [1.0] * 48, "b": [1.0] * 48}) is None


def test_at_the_last_look_a_fractional_task_below_its_floor_is_rejected_exactly():
    test = next(t for t in counter_example_stopper().tests if t.task == "f1")
    y = np.array(COUNTER_EXAMPLE)
    y[-1] = 0.9  # 28.9/48 = 60.2%: still passes
    assert not test.decide(y).reject
    y[-2:] = 0.0  # 27/48 = 56.3%
    decision = test.decide(y)
    assert decision.reject and decision.certain and decision.level == 1.0


def test_fractional_clearly_failing_is_rejected_early():
    rng = np.random.default_rng(3)
    test = FloorTest("f1", 0.6, 100, 0.05 / 3, planned_looks(100, 12), binary=False, limit=0.6)
    decision = test.decide(rng.random(24) * 0.4)  # mean about 0.2 against a 0.6 floor
    assert decision.reject and not decision.certain and decision.bound < 0.6


# ---- deterministic rejection, orientation, Bonferroni ----


def test_certain_rejection_when_unseen_items_cannot_make_it():
    test = binary_test(48, 0.6, 0.05, 12)
    decision = test.decide(np.zeros(20))  # 28 unseen < 29 needed
    assert decision.reject and decision.certain and decision.level == 1.0
    assert "certain" in decision.reason and "even if all 28 unseen items are right" in decision.reason
    assert not test.decide(np.zeros(19)).certain  # 29 unseen could still make it


def test_lower_is_better_mirrors_higher_is_better():
    ceiling = floor_tests(rule="point", floors={"err": 0.3}, tasks={"err": TaskSpec(60, higher_is_better=False)},
                          alpha=0.05, round_size=12).tests[0]  # fmt: skip
    floor = binary_test(60, 0.7, 0.05, 12)
    assert ceiling.good_needed == floor.good_needed
    rng = np.random.default_rng(0)
    for _ in range(50):
        errors = (rng.random(24) < rng.random()).astype(float)
        a, b = ceiling.decide(errors), floor.decide(1 - errors)
        assert a.reject == b.reject and a.bound == pytest.approx(1 - b.bound)
    assert ceiling.decide(np.ones(12)).reject  # 12/12 errors against a 30% ceiling
    assert "at least" in ceiling.decide(np.ones(12)).reason and "ceiling 30.0%" in ceiling.decide(np.ones(12)).reason


def test_bonferroni_split_over_every_test_of_a_variant():
    tasks = {"a": TaskSpec(48), "b": TaskSpec(100), "c": TaskSpec(60, binary=False)}
    stopper = floor_tests(rule="non_inferiority", floors={"a": 0.6, "b": 0.5, "weighted": 0.5}, tasks=tasks,
                          alpha=0.06, round_size=12, margins={"a": 0.02})  # fmt: skip
    assert len(stopper.tests) == 5  # floors a, b (point checks) + non-inferiority on a, b, c
    assert all(t.alpha == pytest.approx(0.012) for t in stopper.tests)
    assert sum(t.alpha for t in stopper.tests) == pytest.approx(stopper.alpha)
    assert {t.rule for t in stopper.tests if t.kind == "floor"} == {"point"}
    assert any("weighted" in note for note in stopper.notes)
    reference = floor_tests(rule="non_inferiority", floors={"a": 0.6}, tasks=tasks, alpha=0.06, round_size=12,
                            non_inferiority_tasks=())  # fmt: skip
    assert len(reference.tests) == 1 and reference.tests[0].alpha == pytest.approx(0.06)


def test_non_inferiority_uses_paired_differences():
    stopper = floor_tests(rule="non_inferiority", floors={}, tasks={"a": TaskSpec(100)}, alpha=0.05, round_size=20)
    ref = np.r_[np.ones(30), np.zeros(10)]
    worse = stopper.check({"a": np.zeros(40)}, {"a": ref})  # 30 items lost out of 40
    assert worse is not None and "beyond the 5.0-point margin" in worse.reason
    assert stopper.check({"a": ref}, {"a": ref}) is None  # the same answers: no difference
    with pytest.raises(ValueError, match="reference"):
        stopper.check({"a": ref})


def test_non_inferiority_on_a_metric_where_lower_is_better():
    """An error rate: the variant is worse when its errors rise above the reference's."""
    tasks = {"err": TaskSpec(100, higher_is_better=False)}
    stopper = floor_tests(rule="non_inferiority", floors={}, tasks=tasks, alpha=0.05, round_size=20)
    test = stopper.tests[0]
    assert test.target == pytest.approx((1 - 0.05) / 2)  # oriented: (d + 1) / 2 >= (1 - margin) / 2
    ref = np.r_[np.zeros(30), np.ones(10)]  # the reference errs on 10 of 40
    worse = stopper.check({"err": np.ones(40)}, {"err": ref})  # the variant errs on all 40
    assert worse is not None and "beyond the 5.0-point margin" in worse.reason
    assert stopper.check({"err": ref}, {"err": ref}) is None  # the same errors: no difference
    assert stopper.check({"err": np.zeros(40)}, {"err": ref}) is None  # fewer errors: better


def test_scores_are_validated():
    test = binary_test(48, 0.6, 0.05, 12)
    with pytest.raises(ValueError, match="binary"):
        test.decide([0.5] * 12)
    with pytest.raises(ValueError, match="for 48 items"):
        test.decide([1] * 49)


# ---- thresholds: the rule keeps its meaning at the full set ----


@settings(max_examples=60, deadline=None)
@given(n_total=st.integers(10, 400), floor=st.floats(0.02, 0.97), confidence=st.sampled_from([0.8, 0.9, 0.95, 0.99]))
def test_wilson_threshold_is_the_exact_boundary(n_total, floor, confidence):
    """At t the full-set Wilson lower bound clears the floor; one success fewer does not."""
    t = wilson_threshold(floor, n_total, confidence, higher_is_better=True, binary=True)
    if math.isnan(t):  # nothing passes: not even all items right
        assert wilson_interval(n_total, n_total, confidence)[0] < floor - EPS
        return
    k = round(t * n_total)
    assert k / n_total == t
    assert wilson_interval(t * n_total, n_total, confidence)[0] >= floor - EPS
    if k > 0:
        assert wilson_interval((k - 1) / n_total * n_total, n_total, confidence)[0] < floor - EPS


@settings(max_examples=40, deadline=None)
@given(n_total=st.integers(10, 300), ceiling=st.floats(0.05, 0.95))
def test_wilson_ceiling_is_the_exact_boundary(n_total, ceiling):
    t = wilson_threshold(ceiling, n_total, 0.95, higher_is_better=False, binary=True)
    if math.isnan(t):
        assert wilson_interval(0, n_total)[1] > ceiling + EPS
        return
    k = round(t * n_total)
    assert wilson_interval(k, n_total)[1] <= ceiling + EPS
    if k < n_total:
        assert wilson_interval(k + 1, n_total)[1] > ceiling + EPS


def test_thresholds_agree_with_the_selection():
    """Same tolerance as the selection's checks, and the same interval the selection computes."""
    from selector.selection.checks import EPS as SELECTION_EPS
    from selector.selection.evidence import task_interval
    from selector.records import TaskResult

    assert EPS == SELECTION_EPS
    assert point_threshold(0.6, 30, True, True) == 18 / 30  # 18/30 meets a 0.6 floor
    for method in ("exact", "wilson"):
        for n_total, floor in ((48, 0.6), (200, 0.75), (40, 0.3)):
            t = full_set_threshold("lower_bound", floor, n_total, ci_method=method)
            for k, passes in ((round(t * n_total), True), (round(t * n_total) - 1, False)):
                result = TaskResult(task="t", metric="acc", value=k / n_total, ci_low=0, ci_high=1, n=n_total)
                low = task_interval(result, 0.95, method, 10, 0).low
                assert (low >= floor - SELECTION_EPS) is passes


def test_fractional_and_bootstrap_thresholds_are_conservative():
    t = wilson_threshold(0.6, 100, 0.95, higher_is_better=True, binary=False)
    assert wilson_interval(t * 100, 100)[0] < 0.6 - EPS  # just below the boundary: never rejects a pass
    assert wilson_interval((t + 1e-6) * 100, 100)[0] >= 0.6 - EPS
    assert full_set_threshold("lower_bound", 0.6, 100, ci_method="bootstrap", binary=False) == 0.6 - EPS
    # the selection judges a fractional mean by Wilson too under ci_method=wilson (stats.mean_interval)
    assert full_set_threshold("lower_bound", 0.6, 100, ci_method="wilson", binary=False) == t


def test_unreachable_floor_is_rejected_with_certainty():
    stopper = floor_tests(rule="lower_bound", floors={"t": 1.0}, tasks={"t": TaskSpec(30)}, alpha=0.05, round_size=10)
    decision = stopper.check({"t": np.ones(10)})
    assert decision is not None and decision.certain
    assert "no full-set result on 30 items can pass the lower_bound rule's floor 100.0%" in decision.reason


# ---- the case that motivated it ----


@pytest.mark.parametrize("rule", ["point", "lower_bound"])
def test_smollm2_like_variant_stops_at_the_first_look(rule):
    """SmolLM2-135M: 1/12 correct on arithmetic (48 items) against a 60% floor, with three floored
    tasks sharing alpha = 0.05: rejected after the first 12 items."""
    tasks = {"arithmetic": TaskSpec(48), "extraction": TaskSpec(48), "sentiment": TaskSpec(48)}
    stopper = floor_tests(rule=rule, floors=dict.fromkeys(tasks, 0.6), tasks=tasks, alpha=0.05, round_size=12)
    scores = {"arithmetic": np.r_[1.0, np.zeros(11)], "extraction": np.ones(12), "sentiment": np.ones(12)}
    decision = stopper.check(scores)
    assert decision is not None and decision.task == "arithmetic" and decision.n_seen == 12
    assert not decision.certain and decision.level == pytest.approx(1 - 0.05 / 3)
    assert "1/12 correct" in decision.reason and "anytime bound after 12 items" in decision.reason
    # Why Pocock-type spending: on a 200-item task (16 interim looks) it still stops 1/12 at the
    # first look; O'Brien-Fleming-type spending keeps that variant running.
    first_look = np.r_[1.0, np.zeros(11)]
    assert binary_test(200, 0.6, 0.05 / 3, 12, "pocock").decide(first_look).reject
    assert not binary_test(200, 0.6, 0.05 / 3, 12, "obrien_fleming").decide(first_look).reject


def test_policy_like_object_resolves_floors_like_the_selection():
    from selector.config import PolicyConfig

    policy = PolicyConfig(rule="lower_bound", floors={"a": 0.7}, default_floor=0.5)
    stopper = floor_tests_for_policy(policy, {"a": TaskSpec(50), "b": TaskSpec(50)}, alpha=0.05, round_size=10)
    assert {(t.task, t.limit) for t in stopper.tests} == {("a", 0.7), ("b", 0.5)}


def test_evaluation_order_is_seeded_per_task():
    a = evaluation_order(48, 0, "arithmetic")
    assert sorted(a) == list(range(48))
    assert np.array_equal(a, evaluation_order(48, 0, "arithmetic"))
    assert not np.array_equal(a, evaluation_order(48, 0, "sentiment"))
    assert not np.array_equal(a, evaluation_order(48, 1, "arithmetic"))


def test_search_modules_import_no_framework():
    code = ("import sys, selector.search.sequential, selector.search.driver; "
            "print([m for m in ('hydra', 'omegaconf', 'mlflow', 'torch') if m in sys.modules])")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=".")
    assert out.stdout.strip() == "[]"


def test_the_exact_ci_methods_threshold_is_where_the_selection_starts_passing():
    from selector.selection.evidence import task_interval
    from selector.records import TaskResult

    t = full_set_threshold("lower_bound", 0.6, 48, ci_method="exact")
    k = round(t * 48)
    for count, passes in ((k, True), (k - 1, False)):
        scores = {str(i): float(i < count) for i in range(48)}
        result = TaskResult(task="t", metric="exact_match", value=count / 48, ci_low=0, ci_high=1, n=48,
                            item_scores=scores)  # fmt: skip
        assert (task_interval(result, 0.95, "exact", 10, 0).low >= 0.6 - EPS) is passes
    assert t >= full_set_threshold("lower_bound", 0.6, 48, ci_method="wilson")  # exact: never the laxer (36/48 both here)
