"""Siblings of a failing baseline are not needed (issue 34, point 1): when a model's baseline is
stopped or rejected on a floor by more than search.sibling_margin, its other precisions are
recorded not needed without being converted, quantized or loaded."""

from __future__ import annotations

import pytest

from selector.compose import compose
from selector.config import PolicyConfig
from selector.errors import UserError
from selector.records import SearchInfo
from selector.search.candidates import Candidate, Outcome, Shortfall
from selector.search.driver import SearchDriver
from selector.selection import select
from selector.sweep.outcomes import outcome_of
from tests.factories import GB, hits, run_record, task_result


def ladder() -> list[Candidate]:
    """Two models of three precisions, the small one first (planned GB)."""
    return [Candidate(f"{m}/{p}", gb * GB, m, needs_quantization=p != "bf16", is_baseline=p == "bf16")
            for m, sizes in (("small", (0.27, 0.16, 0.12)), ("big", (3.55, 2.24, 1.63)))
            for p, gb in zip(("bf16", "int8", "gptq-int4"), sizes)]  # fmt: skip


FAR = Shortfall("arithmetic", 0.29, 0.60)  # the SmolLM2: 0 of 12, at most 29% against a 60% floor


def stopped(shortfall: Shortfall | None = FAR) -> Outcome:
    return Outcome("stopped", "arithmetic: at most 29.2% ...", items=24, shortfall=shortfall)


def test_the_siblings_of_a_baseline_far_below_a_floor_are_not_needed():
    driver = SearchDriver(ladder(), baseline_first=True, sibling_margin=0.15)
    assert driver.next_wave().names == ("small/bf16",)
    driver.report("small/bf16", stopped())
    verdicts = {n: (s, r) for n, s, r in driver.verdicts()}
    for name in ("small/int8", "small/gptq-int4"):
        status, reason = verdicts[name]
        assert status == "pruned"
        assert reason == ("not needed: small/bf16 is at most 29.0% on arithmetic (anytime bound); a quantized copy "
                          "would need +31.0 points (more than search.sibling_margin, 15 points)")
    assert driver.next_wave().names == ("big/bf16",)  # the other model is untouched
    assert driver.counts()["siblings_not_needed"] == 2 and driver.counts()["materialized"] == 2


def test_siblings_run_when_the_baseline_misses_by_less_than_the_margin_or_the_rule_is_off():
    near = Shortfall("arithmetic", 0.50, 0.60)  # 10 points: a quantized copy might make it up
    for driver, outcome in ((SearchDriver(ladder(), baseline_first=True, sibling_margin=0.15), stopped(near)),
                            (SearchDriver(ladder(), baseline_first=True, sibling_margin=None), stopped()),
                            (SearchDriver(ladder(), baseline_first=True, sibling_margin=0.15, complete=True), stopped()),
                            (SearchDriver(ladder(), baseline_first=True, sibling_margin=0.15), stopped(None))):
        driver.next_wave()
        driver.report("small/bf16", outcome)
        assert driver.next_wave().names == ("small/gptq-int4",)  # the next smallest: they run
        assert driver.counts()["siblings_not_needed"] == 0


def test_a_baseline_rejected_on_the_full_set_and_a_ceiling():
    driver = SearchDriver(ladder(), baseline_first=True, sibling_margin=0.15)
    driver.next_wave()
    driver.report("small/bf16", Outcome("rejected", "arithmetic: 2.1% < floor 60.0%", items=186,
                                        shortfall=Shortfall("arithmetic", 0.021, 0.60, anytime=False)))
    assert "is at most 2.1% on arithmetic (all items scored); a quantized copy would need +57.9 points" in \
        driver.states["small/int8"].reason
    error_rate = SearchDriver(ladder(), baseline_first=True, sibling_margin=0.15)
    error_rate.next_wave()
    error_rate.report("small/bf16", stopped(Shortfall("wer", 0.55, 0.30, higher_is_better=False)))
    assert "is at least 55.0% on wer (anytime bound); a quantized copy would need -25.0 points" in \
        error_rate.states["small/gptq-int4"].reason


def test_siblings_wait_for_their_baseline_on_several_workers():
    driver = SearchDriver(ladder(), workers=3, baseline_first=True, sibling_margin=0.15)
    assert driver.next_wave().names == ("small/bf16",)
    assert driver.next_wave() is None
    driver.report("small/bf16", stopped())
    assert driver.next_wave().names == ("big/bf16",)


def test_an_evidence_run_of_a_baseline_prunes_nothing():
    driver = SearchDriver(ladder(), baseline_first=True, sibling_margin=0.15)
    outcomes = {"small/bf16": Outcome("stopped", "sentiment: ...", items=24),
                "small/int8": Outcome("eligible", measured=0.16 * GB), "small/gptq-int4": stopped()}
    while not driver.done:
        wave = driver.next_wave()
        for name in wave.names:
            if wave.kind == "evidence":
                driver.report(name, Outcome("rejected", "far below", shortfall=FAR))
            else:
                driver.report(name, outcomes[name])
    assert driver.best == "small/int8" and driver.states["small/int8"].status == "eligible"


def test_under_the_fixed_sequence_the_rule_agrees_with_the_selection():
    """The sequence walks the selection's ladder (a model's bf16 before its lower precisions); a
    baseline stopped far below a floor ends the sequence anyway, and what the rule skips is not in
    the selection's ladder: search and selection name the same winner."""
    records = {
        "big/bf16": run_record("big", "bf16", [task_result("t", hits(46, 48))], params=2 * 10**9, weight_bytes=4 * GB),
        "big/int8": run_record("big", "int8", [task_result("t", hits(45, 48))], params=2 * 10**9, weight_bytes=2 * GB),
        "small/bf16": run_record("small", "bf16", params=10**8, status="stopped", reason="stopped early",
                                 search=SearchInfo(strategy="adaptive", task="t", bound=0.2, floor=0.7)),
    }
    order = ("big/bf16", "big/int8", "small/bf16", "small/int8")
    cands = [Candidate(n, 1.0, n.split("/")[0], is_baseline=n.endswith("bf16")) for n in order]
    driver = SearchDriver(cands, sequence=order, sibling_margin=0.15)
    policy = PolicyConfig(floors={"t": 0.7}, winner_control="fixed_sequence")
    seen = []
    while not driver.done:
        for name in driver.next_wave().names:
            seen.append(records[name])
            verdicts = {v.variant: v for v in select(seen, policy).verdicts}
            driver.report(name, outcome_of(records[name], verdicts.get(name), policy))
    assert driver.states["small/int8"].status == "pruned"
    assert driver.best == select(seen, policy).winner == "big/int8"


# ---- the sweep's side: outcomes from records, the config ----


def test_outcome_of_reads_the_bound_a_baseline_was_stopped_with():
    policy = PolicyConfig(floors={"arithmetic": 0.6})
    record = run_record("smollm2-135m", "bf16", params=135 * 10**6, status="stopped", reason="stopped early: ...",
                        search=SearchInfo(strategy="adaptive", items_evaluated=24, items_total=186, task="arithmetic",
                                          bound=0.292, level=0.983, floor=0.6))
    outcome = outcome_of(record, None, policy)
    assert outcome.status == "stopped" and outcome.shortfall == Shortfall("arithmetic", 0.292, 0.6)
    assert outcome.shortfall.gap == pytest.approx(0.308)
    record.search.floor = None  # stopped on a non-inferiority margin: no floor to measure against
    assert outcome_of(record, None, policy).shortfall is None


def test_outcome_of_a_rejected_baseline_takes_its_largest_miss_by_the_full_set_score():
    policy = PolicyConfig(rule="lower_bound", floors={"arithmetic": 0.6, "sentiment": 0.8})
    record = run_record("gemma3-270m", "bf16", [task_result("arithmetic", hits(2, 48)),
                                                task_result("sentiment", hits(41, 48))],
                        params=268 * 10**6, weight_bytes=GB // 2)  # fmt: skip
    [verdict] = select([record], policy).verdicts
    outcome = outcome_of(record, verdict, policy)
    assert outcome.status == "rejected" and outcome.shortfall.task == "arithmetic"
    assert outcome.shortfall.bound == pytest.approx(2 / 48) and not outcome.shortfall.anytime


def test_sibling_margin_is_a_search_setting_checked_before_anything_loads():
    assert compose([]).search.sibling_margin == 0.15
    assert compose(["search.sibling_margin=null"]).search.sibling_margin is None
    with pytest.raises(UserError, match="field 'search.sibling_margin' must be a fraction in \\[0, 1\\]"):
        compose(["search.sibling_margin=15"])
