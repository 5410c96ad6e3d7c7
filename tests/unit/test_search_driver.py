"""The adaptive search's state machine (selector/search/driver.py): order, waves, pruning and its
margin, evidence, failures and objectives that cannot be planned."""

from __future__ import annotations

import pytest

from selector.search.candidates import Candidate, Outcome
from selector.search.driver import SearchDriver
from selector.search.order import search_order

GB = 1e9


def ladder() -> list[Candidate]:
    """Two models, three precisions each; planned weight in bytes."""
    return [
        Candidate("small/bf16", 1.0 * GB, "small", is_baseline=True),
        Candidate("small/int8", 0.6 * GB, "small", needs_quantization=True),
        Candidate("small/int4", 0.4 * GB, "small", needs_quantization=True),
        Candidate("big/bf16", 3.0 * GB, "big", is_baseline=True),
        Candidate("big/int8", 1.7 * GB, "big", needs_quantization=True),
        Candidate("big/int4", 1.02 * GB, "big", needs_quantization=True),
    ]


def run(driver: SearchDriver, outcomes: dict[str, Outcome]) -> list[tuple[str, tuple[str, ...]]]:
    """Drive to the end, answering each handed-out name from `outcomes`; returns the waves."""
    waves = []
    while not driver.done:
        wave = driver.next_wave()
        assert wave is not None, "not done, yet nothing handed out"
        waves.append((wave.kind, wave.names))
        for name in wave.names:
            driver.report(name, outcomes[name])
    return waves


def eligible(gb: float) -> Outcome:
    return Outcome("eligible", measured=gb * GB, items=144)


STOPPED = Outcome("stopped", reason="arithmetic: at most 31.4% ... < floor 60.0%", items=12)


def test_order_smallest_first_and_unquantized_first_among_equals():
    names = [c.name for c in search_order(ladder(), tie_tolerance=0.05)]
    # big/int4 (1.02 GB) and small/bf16 (1.0 GB) are equal within 5%: the unquantized one goes first
    assert names == ["small/int4", "small/int8", "small/bf16", "big/int4", "big/int8", "big/bf16"]
    tight = [c.name for c in search_order(ladder(), tie_tolerance=0.0)]
    assert tight.index("small/bf16") < tight.index("big/int4")  # plain size order without the rule
    swapped = [Candidate("q", 1.0 * GB, "m", needs_quantization=True), Candidate("plain", 1.04 * GB, "n")]
    assert [c.name for c in search_order(swapped, 0.05)] == ["plain", "q"]
    assert [c.name for c in search_order(swapped, 0.03)] == ["q", "plain"]  # 4% apart: not equal at 3%


def test_single_worker_stops_at_the_first_eligible_and_prunes_the_rest():
    driver = SearchDriver(ladder())
    outcomes = {"small/int4": STOPPED, "small/int8": eligible(0.6), "small/bf16": eligible(1.0)}
    waves = run(driver, outcomes)
    # small/bf16 (the winner's baseline) was pruned, so it comes back as evidence, in full
    assert waves == [("search", ("small/int4",)), ("search", ("small/int8",)), ("evidence", ("small/bf16",))]
    status = {name: (s, why) for name, s, why in driver.verdicts()}
    assert status["small/int4"][0] == "stopped" and "31.4%" in status["small/int4"][1]
    assert status["big/int4"][0] == "pruned"
    assert status["big/int4"][1].startswith("not needed: small/int8 already meets every floor and is smaller")
    assert status["small/bf16"] == ("eligible", "evidence for small/int8: eligible")
    assert driver.best == "small/int8"
    counts = driver.counts()
    assert counts["materialized"] == 3 and counts["items"] == 12 + 144 + 144 and counts["pruned"] == 3


def test_waves_with_several_workers_keep_the_order():
    driver = SearchDriver(ladder(), workers=2)
    first = driver.next_wave()
    assert first.kind == "search" and first.names == ("small/int4", "small/int8") and not first.full
    assert driver.next_wave() is None  # both slots busy
    driver.report("small/int4", STOPPED)
    assert driver.next_wave().names == ("small/bf16",)  # a slot freed: the next in order
    driver.report("small/int8", eligible(0.6))  # prunes everything above 0.63 GB not yet started
    driver.report("small/bf16", eligible(1.0))  # was already running: its result still counts
    assert driver.next_wave() is None and driver.done
    assert driver.counts()["materialized"] == 3 and driver.best == "small/int8"


def test_prune_margin_keeps_candidates_the_plan_may_overstate():
    cands = [Candidate("a", 1.00 * GB, "a", is_baseline=True), Candidate("b", 1.04 * GB, "b", is_baseline=True),
             Candidate("c", 1.06 * GB, "c", is_baseline=True)]  # fmt: skip
    driver = SearchDriver(cands, prune_margin=0.05, tie_tolerance=0.0)
    run(driver, {"a": eligible(1.0), "b": eligible(0.98)})
    status = {name: s for name, s, _ in driver.verdicts()}
    # b's plan (1.04) is within 5% of a's measured 1.0: run, and it turns out smaller; c is pruned
    assert status == {"a": "eligible", "b": "eligible", "c": "pruned"}
    assert driver.best == "b"


def test_complete_runs_everything():
    driver = SearchDriver(ladder(), complete=True)
    outcomes = {c.name: eligible(c.planned / GB) for c in ladder()}
    waves = run(driver, outcomes)
    assert len(waves) == 6 and driver.counts()["pruned"] == 0
    assert any("complete" in note for note in driver.notes)


def test_failure_moves_on_to_the_next_in_order():
    driver = SearchDriver(ladder())
    outcomes = {"small/int4": Outcome("failed", reason="CUDA out of memory"), "small/int8": eligible(0.6),
                "small/bf16": eligible(1.0)}  # fmt: skip
    waves = run(driver, outcomes)
    assert [w[1][0] for w in waves] == ["small/int4", "small/int8", "small/bf16"]
    assert ("small/int4", "failed", "CUDA out of memory") in driver.verdicts()


def test_unavailable_candidates_are_skipped_without_running():
    cands = [Candidate("x", 0.5 * GB, "x", available=False), *ladder()]
    driver = SearchDriver(cands)
    wave = driver.next_wave()
    assert wave.names == ("small/int4",)
    assert ("x", "skipped", "unavailable") in driver.verdicts()


def test_evidence_not_needed_when_the_baseline_saw_every_item():
    driver = SearchDriver(ladder())
    outcomes = {"small/int4": Outcome("rejected", items=144), "small/int8": Outcome("rejected", items=144),
                "small/bf16": eligible(1.0), "big/int4": STOPPED}  # fmt: skip
    waves = run(driver, outcomes)
    # big/int4 (planned 1.02 GB) is within the 5% margin of small/bf16's 1.0 GB: it still runs
    assert [w[0] for w in waves] == ["search"] * 4 and driver.best == "small/bf16"


def test_evidence_after_an_early_stop_of_the_baseline():
    cands = [Candidate("m/int4", 0.4 * GB, "m", needs_quantization=True),
             Candidate("m/bf16", 1.0 * GB, "m", is_baseline=True),
             Candidate("n/int4", 0.5 * GB, "n", needs_quantization=True)]  # fmt: skip
    driver = SearchDriver(cands, complete=True)
    waves = run(driver, {"m/int4": eligible(0.4), "n/int4": STOPPED, "m/bf16": STOPPED})
    assert waves[-1] == ("evidence", ("m/bf16",))
    assert driver.states["m/bf16"].runs == 2  # materialized twice: the early stop, then in full


def test_failed_baseline_gives_a_note_not_a_wave():
    driver = SearchDriver(ladder())
    waves = run(driver, {"small/int4": eligible(0.4), "small/bf16": Outcome("rejected", items=144)})
    assert waves == [("search", ("small/int4",)), ("evidence", ("small/bf16",))]
    driver2 = SearchDriver(ladder())
    driver2.states["small/bf16"].status = "failed"
    run(driver2, {"small/int4": eligible(0.4)})
    assert any("baseline small/bf16 failed" in note for note in driver2.notes)


def test_first_runs_before_the_search_and_in_full():
    driver = SearchDriver(ladder(), first=("big/bf16",))
    wave = driver.next_wave()
    assert wave.kind == "first" and wave.names == ("big/bf16",) and wave.full
    assert driver.next_wave() is None  # the ordered search waits for the reference
    driver.report("big/bf16", eligible(3.0))
    assert driver.next_wave().names == ("small/int4",)
    assert "big/bf16" not in driver.order


@pytest.mark.parametrize("objective", ["latency", "cost"])
def test_objectives_the_plan_cannot_estimate_prune_nothing(objective):
    driver = SearchDriver(ladder(), objective=objective)
    outcomes = {c.name: Outcome("eligible", measured=100.0) for c in ladder()}
    waves = run(driver, outcomes)
    assert len(waves) == 6 and driver.counts()["pruned"] == 0
    assert any(f"objective {objective}: the plan cannot estimate it" in note for note in driver.notes)


def test_misuse_is_refused():
    with pytest.raises(ValueError, match="unique"):
        SearchDriver([*ladder(), ladder()[0]])
    with pytest.raises(ValueError, match="tie_tolerance"):
        SearchDriver(ladder(), tie_tolerance=0.1, prune_margin=0.05)
    with pytest.raises(ValueError, match="measured"):
        Outcome("eligible")
    driver = SearchDriver(ladder())
    with pytest.raises(ValueError, match="not running"):
        driver.report("big/bf16", eligible(3.0))


def test_fixed_sequence_runs_largest_first_and_stops_below_a_failure():
    from selector.search.candidates import Candidate, Outcome
    from selector.search.driver import SearchDriver

    pool = [Candidate(n, size, n.split("/")[0]) for n, size in
            (("s/int4", 1.0), ("s/bf16", 2.0), ("m/int4", 3.0), ("m/bf16", 6.0), ("l/bf16", 12.0))]
    sequence = ("l/bf16", "m/bf16", "m/int4", "s/bf16", "s/int4")  # the selection's ladder, given
    driver = SearchDriver(pool, sequence=sequence)
    assert driver.order == sequence
    wave = driver.next_wave()
    driver.report(wave.names[0], Outcome("eligible", measured=12.0))  # no pruning of smaller ones
    wave = driver.next_wave()
    assert wave.names == ("m/bf16",)
    driver.report("m/bf16", Outcome("stopped", "a floor out of reach"))
    assert driver.next_wave() is None and driver.done
    assert {n: s for n, s, _ in driver.verdicts()} == {
        "l/bf16": "eligible", "m/bf16": "stopped", "m/int4": "pruned", "s/bf16": "pruned", "s/int4": "pruned"}
    assert "stopped at m/bf16" in dict((n, r) for n, _, r in driver.verdicts())["s/int4"]


def test_baseline_first_moves_each_baseline_before_its_siblings_only():
    names = list(SearchDriver(ladder(), baseline_first=True).order)
    # each model's bf16 jumps to just before its smallest sibling; the models keep their places
    assert names == ["small/bf16", "small/int4", "small/int8", "big/bf16", "big/int4", "big/int8"]
    unavailable = [c if c.name != "small/int4" else Candidate(c.name, c.planned, c.model, True, False, False)
                   for c in ladder()]
    names = list(SearchDriver(unavailable, baseline_first=True).order)
    assert names.index("small/bf16") == names.index("small/int8") - 1  # skipped siblings do not count


def test_baseline_first_loads_the_winners_baseline_once():
    outcomes = {"small/bf16": eligible(1.0), "small/int4": STOPPED, "small/int8": eligible(0.6),
                "big/bf16": eligible(3.0), "big/int4": eligible(1.0), "big/int8": eligible(1.7)}
    before = SearchDriver(ladder())
    after = SearchDriver(ladder(), baseline_first=True)
    assert [w for w in run(before, outcomes)][-1] == ("evidence", ("small/bf16",))  # loaded again after the search
    waves = run(after, outcomes)
    assert waves == [("search", ("small/bf16",)), ("search", ("small/int4",)), ("search", ("small/int8",))]
    assert after.best == before.best == "small/int8"
    assert after.counts()["materialized"] == before.counts()["materialized"] == 3
    assert after.states["small/bf16"].runs == 1


def test_baseline_first_holds_a_sibling_back_while_its_baseline_runs():
    driver = SearchDriver(ladder(), workers=2, baseline_first=True)
    first = driver.next_wave()
    assert first.names == ("small/bf16",)  # its siblings wait for their reference; nothing larger jumps ahead
    assert driver.next_wave() is None
    driver.report("small/bf16", eligible(1.0))  # prunes big/int8 and big/bf16 (planned above 1.05 GB)
    assert driver.next_wave().names == ("small/int4", "small/int8")


def test_baseline_first_leaves_the_fixed_sequence_alone():
    sequence = tuple(c.name for c in sorted(ladder(), key=lambda c: -c.planned))
    assert SearchDriver(ladder(), sequence=sequence, baseline_first=True).order == sequence
