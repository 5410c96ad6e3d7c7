"""The sweep's core (selector.sweep.lifecycle, selector.sweep.state) on hand-built plans and
records, in this process: no Hydra, no model, no subprocess. The launcher here is a function that
writes the record each job would have written, so the search's decisions and the end's selection
are the real ones, made from those records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from selector.compose import compose
from selector.config import to_dict
from selector.errors import UserError
from selector.records import RunRecord
from selector.sweep.lifecycle import FULL, Sweep
from selector.sweep.state import STATE_ENV, PlannedEntry, SearchSummary, SweepState, read_state, write_state
from selector.sweep.width import Width
from tests.factories import GB, hits, run_record, task_result

WEIGHTS = {"bf16": 2.0, "int8": 1.0, "int4": 0.5}  # GB of weights, as planned and as measured


@pytest.fixture(autouse=True)
def _no_sweep_left_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """write_state points the process's environment at the sweep it wrote; a test's must not outlive it."""
    monkeypatch.setenv(STATE_ENV, "")  # put back as it was (unset) when the test ends


def plan(tmp_path: Path, *, fidelity: bool = False) -> SweepState:
    cfg = compose(["policy.floors={t: 0.8}", "tracker.kind=none", f"measure.fidelity={fidelity}",
                   f"output_dir={tmp_path / 'out'}"])
    variants = [PlannedEntry(name=f"m/{p}", key=f"key-{p}", overrides=[f"precision={p}"], model="m", precision=p,
                             planned_bytes=w * GB, needs_quantization=p != "bf16", is_baseline=p == "bf16")
                for p, w in WEIGHTS.items()]
    return SweepState(config=to_dict(cfg), parent_run_id=None, sweep_key="sk", variants=variants)


class Jobs:
    """A launcher: each job writes the record of its precision, scoring `right[precision]` of 10 items."""

    def __init__(self, base: Path, right: dict[str, int]) -> None:
        self.base, self.right, self.batches = base, right, []

    def __call__(self, batch: list[list[str]], first_index: int) -> list[str]:
        self.batches.append(batch)
        for overrides in batch:
            precision = overrides[0].split("=", 1)[1]
            record = run_record("m", precision, [task_result("t", hits(self.right[precision], 10))],
                                key=f"key-{precision}", weight_bytes=int(WEIGHTS[precision] * GB))
            record.save(self.base / "m" / precision / "record.json")
        return [o[0] for o in batch]


def walk(tmp_path: Path, right: dict[str, int], siblings: float | None = None, **plan_args: bool) -> tuple[Sweep, Jobs]:
    """An adaptive walk; siblings: search.sibling_margin (off unless given, so the order is smallest
    first without fidelity)."""
    base = tmp_path / "sweep"
    state = plan(tmp_path, **plan_args)
    write_state(base, state)
    jobs = Jobs(base, right)
    sweep = Sweep(base)
    search = {"strategy": "adaptive", "sibling_margin": siblings}
    sweep.walk([v.overrides for v in state.variants], search, lambda: Width(1, "test"), jobs)
    return sweep, jobs


def test_state_round_trips_through_sweep_json(tmp_path: Path) -> None:
    state = plan(tmp_path)
    state.search = SearchSummary(strategy="adaptive", order=["m/int4"], counts={"pruned": 2})
    write_state(tmp_path, state)
    assert read_state(tmp_path) == state
    assert read_state(tmp_path).planned()["m/int8"].planned_bytes == 1.0 * GB


def test_an_older_sweep_json_reads_with_defaults_and_a_broken_one_names_its_file(tmp_path: Path) -> None:
    (tmp_path / "sweep.json").write_text(json.dumps({"parent_run_id": "abc", "variants": [{"name": "m/bf16"}],
                                                     "a_field_from_a_newer_version": 1}))
    old = read_state(tmp_path)
    assert (old.parent_run_id, old.config, old.variants[0].precision, old.search) == ("abc", None, "", None)
    assert read_state(tmp_path / "no-such-folder") == SweepState()
    (tmp_path / "sweep.json").write_text("{not json")
    with pytest.raises(UserError, match="sweep.json: not a readable sweep state"):
        read_state(tmp_path)


def test_the_smallest_eligible_variant_prunes_the_larger_and_its_baseline_runs_as_evidence(tmp_path: Path) -> None:
    sweep, jobs = walk(tmp_path, {"int4": 9, "int8": 9, "bf16": 10})
    assert jobs.batches == [[["precision=int4"]], [["precision=bf16", FULL]]]
    search = read_state(sweep.base).search
    assert search is not None and search.strategy == "adaptive"
    assert [(v.name, v.status) for v in search.verdicts] == [("m/int4", "eligible"), ("m/int8", "pruned"),
                                                             ("m/bf16", "eligible")]
    assert [(w.kind, w.names) for w in search.waves] == [("search", ["m/int4"]), ("evidence", ["m/bf16"])]


def test_a_rejected_variant_hands_the_search_to_the_next_larger(tmp_path: Path) -> None:
    sweep, jobs = walk(tmp_path, {"int4": 3, "int8": 9, "bf16": 10})
    assert jobs.batches == [[["precision=int4"]], [["precision=int8"]], [["precision=bf16", FULL]]]
    verdicts = {v.name: (v.status, v.reason) for v in read_state(sweep.base).search.verdicts}
    assert verdicts["m/int4"] == ("rejected", "t: 30.0% < floor 80.0% (50.0 points short)")
    assert verdicts["m/bf16"] == ("eligible", "evidence for m/int8: meets every floor")


def test_with_fidelity_the_baseline_runs_first_and_is_not_run_again(tmp_path: Path) -> None:
    """Its quantized siblings need its outputs (the fidelity reference); it completed, so it is
    already the evidence."""
    _, jobs = walk(tmp_path, {"int4": 9, "int8": 9, "bf16": 10}, fidelity=True)
    assert jobs.batches == [[["precision=bf16"]], [["precision=int4"]]]


def test_grid_launches_every_job_at_once(tmp_path: Path) -> None:
    base = tmp_path / "sweep"
    state = plan(tmp_path)
    write_state(base, state)
    jobs = Jobs(base, {"int4": 3, "int8": 9, "bf16": 10})
    Sweep(base).walk([v.overrides for v in state.variants], {"strategy": "grid"}, lambda: Width(1, "unused"), jobs)
    assert jobs.batches == [[["precision=bf16"], ["precision=int8"], ["precision=int4"]]]
    assert read_state(base).search.strategy == "grid"


def test_finish_selects_from_the_records_and_keeps_the_pruned_as_not_needed(tmp_path: Path,
                                                                             capsys: pytest.CaptureFixture[str]) -> None:
    sweep, _ = walk(tmp_path, {"int4": 9, "int8": 9, "bf16": 10})
    sweep.finish(wall_s=1.0)
    pruned = RunRecord.load(sweep.base / "m" / "int8" / "record.json")
    assert (pruned.status, pruned.key) == ("not_needed", "key-int8")
    report = json.loads((sweep.base / "report" / "report.json").read_text())
    assert report["selection"]["winner"] == "m/int4"
    assert report["context"]["search"]["savings"]["variants_measured"] == 2.0
    out = capsys.readouterr().out
    assert "adaptive search: 2 of 3 variants measured" in out and "Report:" in out


def test_the_siblings_of_a_baseline_far_below_a_floor_are_recorded_not_needed(tmp_path: Path,
                                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 34: with the sibling rule on, the baseline runs first; 1 of 10 against an 80% floor is 70
    points short, far more than a quantized copy gains, so int8 and int4 never run."""
    sweep, jobs = walk(tmp_path, {"int4": 9, "int8": 9, "bf16": 1}, siblings=0.15)
    assert jobs.batches == [[["precision=bf16"]]]
    search = read_state(sweep.base).search
    assert search.counts["siblings_not_needed"] == 2
    sweep.finish(wall_s=1.0)
    skipped = RunRecord.load(sweep.base / "m" / "int4" / "record.json")
    assert skipped.status == "not_needed"
    assert skipped.reason == ("not needed: m/bf16 is at most 10.0% on t (all items scored); a quantized copy would "
                              "need +70.0 points (more than search.sibling_margin, 15 points)")
    report = json.loads((sweep.base / "report" / "report.json").read_text())
    assert report["context"]["search"]["savings"]["siblings_not_needed"] == 2.0  # the parent run's search/* metric
    out = capsys.readouterr().out
    assert "2 not needed as siblings of a baseline far below a floor (never converted, quantized or loaded)" in out
