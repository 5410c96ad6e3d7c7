"""The fixed sequence with limits, one order for the search and the selection, and sensitivity
under objectives other than size (issue 36, points 1, 2 and 5), each from its reproduction: small
select() and SearchDriver calls on hand-built records."""

from __future__ import annotations

from selector.config import PolicyConfig
from selector.records import SearchInfo
from selector.search.candidates import Candidate, Outcome
from selector.search.driver import SearchDriver
from selector.selection import select
from selector.selection.sequence import in_sequence, ladder, ladder_order
from selector.sweep.outcomes import fixed_sequence, outcome_of
from selector.sweep.state import PlannedEntry
from tests.factories import GB, hits, perf, run_record, task_result


def variant(model: str, precision: str, billions: float, weight_gb: float, right: int, n: int = 48, **fields):
    return run_record(model, precision, [task_result("t", hits(right, n))], params=int(billions * 1e9),
                      weight_bytes=int(weight_gb * GB), **fields)


def verdict(selection, name):
    return next(v for v in selection.verdicts if v.variant == name)


LIMITED = PolicyConfig(rule="lower_bound", floors={"t": 0.7}, max_weight_gb=8, winner_control="fixed_sequence")


# ---- point 1: a budget is a measurement, not a hypothesis under test ----


def test_a_budget_the_largest_misses_does_not_end_the_fixed_sequence():
    """The issue's reproduction: 7B bf16 (14 GB) over an 8 GB budget used to stop the walk, so neither
    1B variant, each meeting its floor, could be claimed: winner None."""
    records = [variant("m7b", "bf16", 7, 14, 46), variant("m1b", "bf16", 1, 2, 45), variant("m1b", "int8", 1, 1, 44)]
    s = select(records, LIMITED)
    assert s.winner == "m1b/int8"
    assert verdict(s, "m7b/bf16").reasons == ["weight 14.00 GB > budget 8.00 GB"]
    assert verdict(s, "m1b/bf16").status == "eligible"
    assert ladder(records, LIMITED) == ["m1b/bf16", "m1b/int8"]  # the over-budget one is not tested at all
    assert ladder(records) == ["m7b/bf16", "m1b/bf16", "m1b/int8"]


def test_a_latency_limit_missed_leaves_the_variant_out_and_a_floor_missed_still_ends_it():
    slow = variant("m7b", "bf16", 7, 6, 46, perf=perf(e2e_ms=900))
    fails = variant("m3b", "bf16", 3, 4, 20, perf=perf(e2e_ms=300))  # 20/48: misses the 70% floor
    small = variant("m1b", "bf16", 1, 2, 45, perf=perf(e2e_ms=100))
    policy = PolicyConfig(rule="lower_bound", floors={"t": 0.7}, latency_limits={"e2e_ms_p50": 500},
                          winner_control="fixed_sequence")
    assert not in_sequence(slow, policy) and in_sequence(fails, policy)
    s = select([slow, fails, small], policy)
    assert s.winner is None  # the walk starts at m3b, which misses its floor: m1b cannot be claimed
    assert any("stopped at the larger m3b/bf16" in r for r in verdict(s, "m1b/bf16").reasons)
    assert select([slow, small], policy).winner == "m1b/bf16"


def test_a_stopped_variant_over_the_budget_is_left_out_too():
    stopped = run_record("m7b", "bf16", params=7 * 10**9, status="stopped", reason="stopped early")
    stopped.memory = variant("x", "bf16", 7, 14, 1).memory  # a stopped variant keeps what it weighed
    small = variant("m1b", "bf16", 1, 2, 45)
    assert select([stopped, small], LIMITED).winner == "m1b/bf16"
    unmeasured = run_record("m7b", "bf16", params=7 * 10**9, status="stopped", reason="stopped early")
    assert select([unmeasured, small], LIMITED).winner is None  # nothing measured over it: a failure


def test_the_search_does_not_end_the_sequence_on_a_budget_alone():
    """The issue: SearchDriver(fixed sequence) given a budget rejection marked every other candidate
    not needed. The sweep's own outcome_of says the rejection is outside the sequence."""
    records = [variant("m7b", "bf16", 7, 14, 46), variant("m1b", "bf16", 1, 2, 45), variant("m1b", "int8", 1, 1, 44)]
    verdicts = {v.variant: v for v in select(records, LIMITED).verdicts}
    outcome = outcome_of(records[0], verdicts["m7b/bf16"], LIMITED)
    assert outcome.status == "rejected" and not outcome.in_sequence
    names = [r.name for r in records]
    driver = SearchDriver([Candidate(n, 1.0, n.split("/")[0]) for n in names], sequence=tuple(names))
    driver.report(driver.next_wave().names[0], outcome)
    assert driver.next_wave().names == ("m1b/bf16",)
    driver.report("m1b/bf16", Outcome("stopped", "a floor out of reach"))
    assert driver.states["m1b/int8"].status == "pruned"  # a floor failure still ends it


# ---- point 2: one order ----


def entry(model: str, precision: str, billions: float, planned_gb: float, bits: int | None = None) -> PlannedEntry:
    config = {"precision": {"name": precision, "bits": bits}} if bits else None
    return PlannedEntry(name=f"{model}/{precision}", model=model, precision=precision, params=int(billions * 1e9),
                        planned_bytes=planned_gb * GB, config=config)


def test_the_search_walks_the_selections_order_where_planned_bytes_disagree():
    """7B int4 (3.5 GB) is planned smaller than 3B bf16 (6 GB): the search used to clear 3B bf16
    first while the selection tested 7B int4 first, and a failing 7B int4 then blocked the 3B bf16
    the search had already cleared."""
    plan = [entry("m7b", "bf16", 7, 14), entry("m7b", "int4", 7, 3.5), entry("m3b", "bf16", 3, 6)]
    order = fixed_sequence(plan)
    assert order == ["m7b/bf16", "m7b/int4", "m3b/bf16"]
    records = [variant("m7b", "bf16", 7, 14, 46), variant("m7b", "int4", 7, 3.5, 20), variant("m3b", "bf16", 3, 6, 44)]
    policy = PolicyConfig(rule="point", floors={"t": 0.7}, winner_control="fixed_sequence")
    assert ladder(records, policy) == order
    driver = SearchDriver([Candidate(e.name, e.planned_bytes, e.model) for e in plan], sequence=tuple(order))
    by_name = {r.name: r for r in records}
    done = []
    while not driver.done:
        for name in driver.next_wave().names:
            done.append(by_name[name])
            verdicts = {v.variant: v for v in select(done, policy).verdicts}
            driver.report(name, outcome_of(by_name[name], verdicts[name], policy))
    assert driver.states["m3b/bf16"].status == "pruned"  # below the failing 7B int4: not measured
    assert driver.best == select(done, policy).winner == "m7b/bf16"


def test_the_qwen_ladders_order_is_parameters_then_bits():
    plan = [entry(f"qwen2.5-{b}b", p, b, gb) for b, sizes in ((7, (15.2, 8.7, 5.6)), (14, (29.5, 16.3, 10.0)),
                                                              (32, (65.5, 34.3, 19.3)))
            for p, gb in zip(("bf16", "int8", "gptq-int4"), sizes)]  # fmt: skip
    order = fixed_sequence(plan)
    assert order[:4] == ["qwen2.5-32b/bf16", "qwen2.5-32b/int8", "qwen2.5-32b/gptq-int4", "qwen2.5-14b/bf16"]
    assert order == ladder_order((e.name, e.params, {"bf16": 16, "int8": 8, "gptq-int4": 4}[e.precision])
                                 for e in plan)  # fmt: skip


def test_a_precision_with_its_own_bits_and_a_model_without_parameters():
    plan = [entry("big", "mystery", 0, 8, bits=4), entry("big", "bf16", 0, 16), entry("small", "bf16", 0, 2)]
    assert fixed_sequence(plan) == ["big/bf16", "big/mystery", "small/bf16"]  # planned bytes x 8 / bits


def test_a_sequence_that_misses_a_candidate_is_refused():
    import pytest

    with pytest.raises(ValueError, match="every candidate"):
        SearchDriver([Candidate("a/bf16", 1.0, "a"), Candidate("b/bf16", 2.0, "b")], sequence=("a/bf16",))


# ---- point 5: sensitivity under objectives other than size ----


def test_sensitivity_under_latency_names_a_larger_variant_stopped_early():
    """select([W int4, S bf16 stopped, B], objective=latency) reported "changed False" with no note:
    the stopped bf16 is larger than the winner, but its latency is unknown and bf16 can be faster."""
    winner = variant("w", "int4", 1, 0.5, 40, perf=perf(e2e_ms=400))
    stopped = run_record("s", "bf16", params=2 * 10**9, status="stopped", reason="stopped early",
                         search=SearchInfo(strategy="adaptive", items_evaluated=12, items_total=48))
    big = variant("b", "bf16", 7, 14, 46, perf=perf(e2e_ms=900))
    s = select([winner, stopped, big], PolicyConfig(floors={"t": 0.7}, objective="latency"))
    assert s.winner == "w/int4"
    lowered = [r for r in s.sensitivity if r["delta"] < 0]
    assert lowered and all("s/bf16 stopped early" in r["note"] and "latency is unknown" in r["note"]
                           for r in lowered)  # fmt: skip
    assert any("Sensitivity after an adaptive search" in w for w in s.warnings)
    [row] = s.sample_size
    assert "s/bf16 stopped early" in row["note"]
    by_size = select([winner, stopped, big], PolicyConfig(floors={"t": 0.7}))  # weight: s/bf16 is larger
    assert not any(r.get("note") for r in by_size.sensitivity if r["delta"] < 0)
