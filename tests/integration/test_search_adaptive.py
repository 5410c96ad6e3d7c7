"""Adaptive search as a user runs it (`selector ...`, search=adaptive is the default):
early stopping with its reason, pruning with the evidence wave, resume by a grid in the same output
folder, a crashing variant, and bad search settings.

The sweeps run on engine=scripted-tiny (tests/scripted.py), which answers as the tiny random model
did without loading one: arithmetic wrong and sentiment right about half the time, so floors decide
who stops: arithmetic 60% stops every variant after its first round, floors of 0 make every variant
eligible (the smallest wins, larger ones are not needed). Each command runs the command line's
entry in this process (tests/sweep_helpers.py run_in_process); its variants run in workers of their
own as always."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.sweep_helpers import cli_in_process, mlflow_runs, run_in_process

TWO_TASKS = ("measure=quick", "evalset.tasks=[sentiment,arithmetic]")


def _records(out: Path) -> dict[str, dict]:  # type: ignore[type-arg]
    [sweep] = sorted((out / "sweeps").iterdir(), key=lambda p: p.stat().st_mtime)[-1:]
    return {f"{p.parent.parent.name}/{p.parent.name}": json.loads(p.read_text()) for p in sweep.rglob("record.json")}


def test_pruning_and_the_evidence_wave(tiny_setup: dict[str, Path], scripted: str) -> None:
    # fidelity and the sibling rule off: with either, bf16, tiny's baseline, would run first
    # (tests/integration/test_memory_phases.py, test_a_baseline_far_below_a_floor_spares_its_siblings)
    result = run_in_process(tiny_setup, "model=tiny", scripted, "precision=fp32,bf16,int8", *TWO_TASKS,
                            "evalset.limit=12", "policy.floors.sentiment=0.0", "policy.floors.arithmetic=0.0",
                            "measure.fidelity=false", "search.sibling_margin=null")
    assert result.returncode == 0, result.stderr[-3000:]
    records = _records(tiny_setup["out"])
    # int8 plans smallest, meets every floor: fp32 is not needed; bf16 (tiny's baseline) runs in full as evidence.
    assert {n: r["status"] for n, r in records.items()} == {
        "tiny/int8": "completed", "tiny/bf16": "completed", "tiny/fp32": "not_needed"}
    assert records["tiny/fp32"]["reason"].startswith("not needed: tiny/int8 already meets every floor and is smaller")
    assert records["tiny/bf16"]["search"]["items_evaluated"] == records["tiny/bf16"]["search"]["items_total"] == 24
    assert "adaptive search: 2 of 3 variants measured, 48 of 72 items scored" in result.stdout
    # the local launcher: waves of one, and the console says why
    assert "3 variants, 1 at a time (local launcher: one variant at a time)" in result.stdout + result.stderr
    latest = max((tiny_setup["out"] / "sweeps").iterdir(), key=lambda p: p.stat().st_mtime)
    state = json.loads((latest / "sweep.json").read_text())
    waves = [(w["kind"], w["names"]) for w in state["search"]["waves"]]
    assert waves == [("search", ["tiny/int8"]), ("evidence", ["tiny/bf16"])]
    assert "wave 2 (evidence, " in result.stdout
    [report] = (tiny_setup["out"] / "sweeps").glob("*/report/report.md")
    text = report.read_text()
    assert "## How the search went" in text and "| tiny/fp32 | not needed |" in text
    assert "evidence for tiny/int8" in text
    state = json.loads(next((tiny_setup["out"] / "sweeps").glob("*/sweep.json")).read_text())
    seed = state["order_seed"]  # drawn for this sweep, kept for the eval set, in every record and the report
    assert state["order_seed_source"] == "drawn" and records["tiny/int8"]["search"]["order_seed"] == seed
    assert f"replay it with search.seed={seed}" in text
    parents, children = mlflow_runs(tiny_setup["out"])
    assert sorted(c.info.run_name for c in children) == ["tiny/bf16", "tiny/int8"]  # nothing ran for fp32
    assert parents[0].data.metrics["sweep/not_needed"] == 1 and parents[0].data.tags["selector.search"] == "adaptive"
    assert parents[0].data.tags["selector.winner"] == "tiny/int8"


def test_early_stop_then_a_grid_in_the_same_folder_scores_only_the_rest(tiny_setup: dict[str, Path],
                                                                        scripted: str) -> None:
    common = ("model=tiny", scripted, "precision=bf16", *TWO_TASKS, "evalset.limit=24", "policy.floors.arithmetic=0.6",
              "policy.floors.sentiment=0.0")
    first = run_in_process(tiny_setup, *common)
    assert first.returncode == 0, first.stderr[-3000:]
    record = _records(tiny_setup["out"])["tiny/bf16"]
    assert record["status"] == "stopped"
    # sentiment's round (cheap: multiple choice) then arithmetic's, where 0/12 cannot reach 60% of 24
    assert (record["search"]["items_evaluated"], record["search"]["items_total"]) == (24, 48)
    assert record["search"]["task"] == "arithmetic" and "certain" in record["search"]["stopped_by"]
    assert record["tasks"]["arithmetic"]["n"] == 12
    _, children = mlflow_runs(tiny_setup["out"])
    [child] = children
    assert child.info.status == "FINISHED" and child.data.tags["selector.status"] == "stopped"  # not a failure
    assert child.data.metrics["search/items_evaluated"] == 24

    reselect = cli_in_process("select", "--from", str(next((tiny_setup["out"] / "sweeps").iterdir())))
    assert reselect.returncode == 0, reselect.stderr[-2000:]
    assert "Partial evidence" in reselect.stdout and "tiny/bf16: 24 of 48 items (stopped)" in reselect.stdout

    grid = run_in_process(tiny_setup, *common, "search=grid")
    assert grid.returncode == 0, grid.stderr[-3000:]
    record = _records(tiny_setup["out"])["tiny/bf16"]
    assert record["status"] == "completed" and record["search"]["strategy"] == "grid"
    assert (record["search"]["items_evaluated"], record["search"]["items_reused"]) == (48, 24)


def test_a_variant_that_crashes_is_recorded_and_the_search_goes_on(tiny_setup: dict[str, Path],
                                                                    scripted: str) -> None:
    result = run_in_process(tiny_setup, "model=tiny", scripted, "precision=bf16,int8", *TWO_TASKS,
                            "evalset.limit=12", "policy.floors.sentiment=0.0", "policy.floors.arithmetic=0.0",
                            env={"SELECTOR_INJECT_FAULT": "tiny/int8@evaluate:raise"})
    assert result.returncode == 0, result.stderr[-3000:]
    records = _records(tiny_setup["out"])
    assert records["tiny/int8"]["status"] == "failed" and records["tiny/bf16"]["status"] == "completed"


@pytest.mark.fast
def test_bad_search_settings_stop_before_anything_loads(tiny_setup: dict[str, Path]) -> None:
    cases = {
        "search=adaptiv": "Did you mean adaptive?",
        "search.alpha=1.5": "field 'search.alpha' must be a probability strictly between 0 and 0.5",
        "search.alpha=0": "field 'search.alpha' must be a probability strictly between 0 and 0.5",
        "search.complete=maybe": "cannot apply search.complete=maybe: Value 'maybe' is not a valid bool",
        "search.strategy=random": "field 'search.strategy' must be adaptive or grid",
        "search.sibling_margin=15": "field 'search.sibling_margin' must be a fraction in [0, 1]",
    }
    for override, expected in cases.items():
        result = run_in_process(tiny_setup, "model=tiny", "precision=bf16", override)
        assert result.returncode == 2, (override, result.stderr[-1000:])
        assert expected in result.stderr and "Traceback" not in result.stderr, (override, result.stderr[-1000:])
    assert not (tiny_setup["out"] / "mlflow.db").exists()


def test_fixed_sequence_runs_largest_first_and_leaves_out_what_falls_below_a_failure(tiny_setup: dict[str, Path],
                                                                                      scripted: str) -> None:
    result = run_in_process(tiny_setup, "model=tiny", scripted, "precision=fp32,bf16,int8", *TWO_TASKS,
                            "evalset.limit=24", "policy.floors.sentiment=0.0", "policy.floors.arithmetic=0.6",
                            "policy.winner_control=fixed_sequence")
    assert result.returncode == 0, result.stderr[-3000:]
    records = _records(tiny_setup["out"])
    # fp32, the largest, misses arithmetic (stopped early); nothing below it can be claimed, so nothing runs
    assert {n: r["status"] for n, r in records.items()} == {
        "tiny/fp32": "stopped", "tiny/bf16": "not_needed", "tiny/int8": "not_needed"}
    assert "fixed sequence down the size ladder stopped at tiny/fp32" in records["tiny/int8"]["reason"]
    state = json.loads(next((tiny_setup["out"] / "sweeps").glob("*/sweep.json")).read_text())
    assert state["search"]["order"] == ["tiny/fp32", "tiny/bf16", "tiny/int8"]


@pytest.mark.fast
def test_a_baseline_far_below_a_floor_spares_its_siblings(tiny_setup: dict[str, Path], scripted: str) -> None:
    """Issue 34: tiny's bf16 is stopped far below a 90% arithmetic floor, so its int8 copy is never
    loaded: recorded not needed with the bound, and said so on the console and the parent run."""
    result = run_in_process(tiny_setup, "model=tiny", scripted, "precision=bf16,int8", *TWO_TASKS,
                            "evalset.limit=24", "policy.floors.sentiment=0.0", "policy.floors.arithmetic=0.9")
    assert result.returncode == 0, result.stderr[-3000:]
    records = _records(tiny_setup["out"])
    assert {n: r["status"] for n, r in records.items()} == {"tiny/bf16": "stopped", "tiny/int8": "not_needed"}
    reason = records["tiny/int8"]["reason"]
    assert reason.startswith("not needed: tiny/bf16 is at most ") and " on arithmetic (anytime bound); a quantized " \
        "copy would need +" in reason, reason
    assert "1 not needed as siblings of a baseline far below a floor" in result.stdout
    parents, children = mlflow_runs(tiny_setup["out"])
    assert [c.info.run_name for c in children] == ["tiny/bf16"]  # nothing ran for int8
    assert parents[0].data.metrics["search/siblings_not_needed"] == 1
