"""Answers under load through a whole sweep, on engine=scripted (no model): the variant whose answers
move while other requests compute (engine.load_flip) shows it in its record, MLflow, the report and
the console, the verdict warns, policy.floors_under_load=c8 rejects it, a level the load test does
not run stops the sweep before anything loads, and a request file's load test scores nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.scripted import write_scripted_engine
from tests.sweep_helpers import mlflow_runs, run_in_process

SWEEP = ("model=tiny", "precision=fp32,bf16", "engine=scripted-moving", "measure=load-quick", "search=grid",
         "evalset.tasks=[arithmetic,extraction]", "evalset.limit=12", "measure.load.concurrency=[1,8]",
         "measure.load.requests_per_level=24", "measure.load.new_tokens=16", "policy.floors.arithmetic=0.5",
         "policy.floors.extraction=0.5")


@pytest.fixture
def moving(tiny_setup: dict[str, Path]) -> dict[str, Path]:
    """Every answer right at rest; bf16's answers all move (right -> wrong) while another request computes."""
    write_scripted_engine(tiny_setup["conf"], "scripted-moving", accuracy={}, default_accuracy=1.0,
                          load_flip={"tiny/bf16": 1.0}, ms_per_token=0.2)
    return tiny_setup


def records(setup: dict[str, Path]) -> dict[str, dict]:  # type: ignore[type-arg]
    found = sorted((setup["out"] / "sweeps").glob("*/tiny/*/record.json"), key=lambda p: p.stat().st_mtime)
    return {json.loads(p.read_text())["variant"]["precision"]: json.loads(p.read_text()) for p in found}


@pytest.mark.fast  # make test-fast
def test_answers_that_move_under_load_are_recorded_logged_reported_and_judged(moving: dict[str, Path]) -> None:
    result = run_in_process(moving, *SWEEP)
    assert result.returncode == 0, result.stderr[-3000:]
    got = records(moving)
    for level in got["fp32"]["perf"]["load"]:  # answers as at rest at every level
        answers = level["answers"]
        assert (answers["requests"], answers["compared"], answers["changed"], answers["failed"]) == (24, 24, 0, 0)
        assert {t: a["value"] for t, a in answers["tasks"].items()} == {"arithmetic": 1.0, "extraction": 1.0}
    c1, c8 = got["bf16"]["perf"]["load"]
    assert c1["answers"]["changed"] == 0  # alone: as at rest
    moved = c8["answers"]
    # Each of the 24 items sent once; every request but the first computes beside another and flips.
    assert moved["compared"] == 24 and moved["changed"] >= 20
    for task, a in moved["tasks"].items():
        assert a["items"] == 12 and a["at_rest"] == 1.0 and a["flips_to_right"] == 0
        assert a["value"] == pytest.approx(1 - a["changed"] / 12) and a["test"] == "mcnemar"
        assert a["p_value"] == pytest.approx(2 * 0.5 ** a["flips_to_wrong"])
    assert moved["p_value"] < 0.01 and moved["examples"][0]["under_load"] == ""

    # MLflow: the level's answers beside its latency, at its concurrency.
    _, children = mlflow_runs(moving["out"])
    (bf16,) = [r for r in children if r.data.tags["selector.precision"] == "bf16"]
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{moving['out'] / 'mlflow.db'}")
    history = {m.step: m.value for m in client.get_metric_history(bf16.info.run_id, "load/answers_changed")}
    assert history == {1: 0.0, 8: float(moved["changed"])}
    # The console and the report show them, and the verdict (floors judged at rest) warns.
    assert "Answers under load (against the same variant at rest)" in result.stdout
    assert "tiny/bf16: answers under load differ from its answers at rest" in result.stdout
    report = next((moving["out"] / "sweeps").glob("*/report/report.md")).read_text()
    assert "### Answers under load" in report and "| tiny/bf16 | c=8 | arithmetic |" in report
    assert json.loads(next((moving["out"] / "sweeps").glob("*/report/report.json")).read_text())[
        "selection"]["winner"] == "tiny/bf16"  # the smaller one: at rest it passes

    # The same floors judged at c8 too: bf16 misses them there; its measurements are reused.
    judged = run_in_process(moving, *SWEEP, "policy.floors_under_load=c8")
    assert judged.returncode == 0, judged.stderr[-3000:]
    assert (judged.stdout + judged.stderr).count("already measured") == 2
    newest = sorted((moving["out"] / "sweeps").glob("*/report/report.json"), key=lambda p: p.stat().st_mtime)[-1]
    selection = json.loads(newest.read_text())["selection"]
    assert selection["winner"] == "tiny/fp32"
    (verdict,) = [v for v in selection["verdicts"] if v["variant"] == "tiny/bf16"]
    assert verdict["status"] == "rejected"
    assert verdict["reasons"][0].startswith("arithmetic under load at c8 (12 items): ")


@pytest.mark.fast
def test_a_floors_level_the_load_test_does_not_run_stops_the_sweep_before_anything_loads(
        moving: dict[str, Path]) -> None:
    result = run_in_process(moving, *SWEEP, "policy.floors_under_load=c16")
    assert result.returncode == 2, result.stderr[-3000:]
    assert "field 'policy.floors_under_load' the load test runs no level c16; its levels: c1, c8" in result.stderr
    assert "Traceback" not in result.stderr and not (moving["out"] / "mlflow.db").exists()


def test_a_request_files_load_test_scores_nothing_and_says_so_once(moving: dict[str, Path]) -> None:
    result = run_in_process(moving, "model=tiny", "precision=bf16", "engine=scripted-moving", "measure=load-quick",
                            "search=grid", "evalset.tasks=[arithmetic]", "evalset.limit=4",
                            "policy.floors.arithmetic=0", "measure.load.requests=loadsets/sample.jsonl")
    assert result.returncode == 0, result.stderr[-3000:]
    record = records(moving)["bf16"]
    assert record["perf"]["load"] and all(lv["answers"] is None for lv in record["perf"]["load"])
    report = next((moving["out"] / "sweeps").glob("*/report/report.md")).read_text()
    assert report.count("answers under load not scored") == 1
    assert "- tiny/bf16: answers under load not scored: the load test sent measure.load.requests " \
           "(loadsets/sample.jsonl), whose rows are not eval items." in report
