"""The Python API (selector.run / selector.load / SweepResult.select): a real sweep over the tiny
model's folder, run in this process through the command line's own entry, into a temporary MLflow
store. Its variants answer through engine=scripted (no model loaded: the API is under test), every
task wrong as the tiny random model gets them."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from pathlib import Path

import pytest

import selector
from selector.errors import ConfigError, UserError
from selector.selection import select
from selector.sweep.state import STATE_ENV
from tests.sweep_helpers import mlflow_runs

pytestmark = pytest.mark.fast  # make test-fast: the Python API, one scripted sweep

TASKS = ["sentiment", "arithmetic"]
# search=grid: these test the API, not the search (which would stop a variant below a 90% floor early)
CHEAP = {"measure": "quick", "evalset": {"limit": 2, "tasks": TASKS}, "tracker": {"retries": 1}, "search": "grid",
         "engine": "scripted", "engine.default_accuracy": 0.0}


def _overrides(model_dir: Path, **extra: object) -> dict[str, object]:
    return {"model": "path", "model.path": str(model_dir), "precision": ["fp32", "bf16"], **CHEAP, **extra}


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> dict[str, object]:
    """One real sweep through the API, with strict floors (no variant meets them),
    and what the process looked like before it."""
    out = tmp_path_factory.mktemp("api") / "out"
    before = {"argv": list(sys.argv), "handlers": list(logging.getLogger().handlers),
              "sigterm": signal.getsignal(signal.SIGTERM), "state": os.environ.get(STATE_ENV)}
    result = selector.run(_overrides(tiny_model_dir, policy={"floors": {"sentiment": 0.9, "arithmetic": 0.9}}),
                          output_dir=out)
    return {"result": result, "out": out, "before": before}


def test_run_returns_the_sweeps_records_recommendation_and_report(first: dict, tiny_model_dir: Path) -> None:  # type: ignore[type-arg]
    result, out = first["result"], first["out"]
    assert isinstance(result, selector.SweepResult)
    assert sorted(r.name for r in result.records) == [f"{tiny_model_dir.name}/bf16", f"{tiny_model_dir.name}/fp32"]
    assert all(r.status == "completed" and set(r.tasks) == set(TASKS) for r in result.records)
    assert result.policy.floors == {"sentiment": 0.9, "arithmetic": 0.9}
    assert result.selection == select(result.records, result.policy)
    assert result.winner is None  # no variant meets a 90% floor
    assert result.sweep_dir is not None and result.sweep_dir.parent == out / "sweeps"
    assert set(result.report_paths) == {"html", "md", "json"} and all(p.is_file() for p in result.report_paths.values())
    report = json.loads(result.report_paths["json"].read_text())
    assert report["selection"]["winner"] is None and report["selection"]["policy"]["floors"] == result.policy.floors
    parents, children = mlflow_runs(out)
    assert [p.info.run_id for p in parents] == [result.parent_run_id]
    assert sorted(c.info.run_id for c in children) == sorted(r.mlflow_run_id for r in result.records)
    assert result.table().loc[f"{tiny_model_dir.name}/fp32", "status"] == "completed"


def test_run_puts_back_what_the_command_line_changes_in_the_process(first: dict) -> None:  # type: ignore[type-arg]
    before = first["before"]
    assert sys.argv == before["argv"]
    assert logging.getLogger().handlers == before["handlers"]
    assert signal.getsignal(signal.SIGTERM) == before["sigterm"]
    assert os.environ.get(STATE_ENV) == before["state"]


def test_select_starts_from_the_sweeps_policy_and_writes_a_report_when_asked(first: dict) -> None:  # type: ignore[type-arg]
    result = first["result"]
    relaxed = result.select({"floors": {"sentiment": 0.0, "arithmetic": 0.0}}, report=True)
    assert relaxed.policy.floors == {"sentiment": 0.0, "arithmetic": 0.0}
    assert relaxed.policy.rule == result.policy.rule  # everything not given is the sweep's
    assert relaxed.winner is not None and relaxed.winner.endswith("/bf16")  # the smaller of two that pass
    assert relaxed.report_paths["html"].is_file() and relaxed.report_paths["html"].parent != result.sweep_dir / "report"
    assert result.winner is None  # the original result is left as it was
    same = result.select(["policy.floors.sentiment=0.0", "policy.floors.arithmetic=0.0"])
    assert same.winner == relaxed.winner and same.report_paths == {}
    with pytest.raises(ConfigError, match="extraction"):  # a floor for a task these records did not measure
        result.select({"floors": {"extraction": 0.5}})


def test_load_reads_a_sweep_back_from_its_folder_and_from_mlflow(first: dict) -> None:  # type: ignore[type-arg]
    result = first["result"]
    from_folder = selector.load(result.sweep_dir)
    assert from_folder.selection == result.selection and from_folder.policy == result.policy
    assert from_folder.report_paths == result.report_paths
    from_mlflow = selector.load(result.parent_run_id, tracking_uri=result.tracking_uri)
    assert sorted(r.key for r in from_mlflow.records) == sorted(r.key for r in result.records)
    assert from_mlflow.policy == result.policy and from_mlflow.winner == result.winner
    assert selector.latest_sweep(result.tracking_uri) == result.parent_run_id
    with pytest.raises(UserError, match="no such folder, and not an MLflow run id"):
        selector.load(first["out"] / "nothing-here")


def test_reused_records_are_judged_by_the_new_sweeps_policy(first: dict, tiny_model_dir: Path) -> None:  # type: ignore[type-arg]
    """The same variants under other floors: nothing is measured again, and the result (and a later
    load of it) uses this sweep's floors, not the ones the reused records were measured under."""
    result = first["result"]
    again = selector.run(_overrides(tiny_model_dir, policy={"floors": {"sentiment": 0.0, "arithmetic": 0.0}}),
                         output_dir=first["out"])
    assert sorted(r.key for r in again.records) == sorted(r.key for r in result.records)
    assert all(r.config["policy"]["floors"]["sentiment"] == 0.9 for r in again.records)  # as measured
    assert again.policy.floors == {"sentiment": 0.0, "arithmetic": 0.0}
    assert again.winner is not None and again.sweep_dir != result.sweep_dir
    assert selector.load(again.sweep_dir).winner == again.winner
    assert selector.load(again.parent_run_id, tracking_uri=again.tracking_uri).policy == again.policy


def test_bad_input_raises_the_typed_error_never_system_exit(tmp_path: Path, tiny_model_dir: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(UserError, match="no such folder"):  # the model check inside the sweep's preflight
        selector.run({"model": "path", "model.path": str(tmp_path / "nope"), "precision": "fp32"}, output_dir=out)
    with pytest.raises(UserError, match="engine.batch_size"):  # before Hydra starts
        selector.run(["model=smollm2-135m", "engine.batch_size=eight"], output_dir=out)
    with pytest.raises(UserError, match="Did you mean bf16"):
        selector.run(["precision=bf61"], output_dir=out)
    with pytest.raises(ConfigError, match="no_such_task"):  # a floor for a task the eval set lacks
        selector.run(_overrides(tiny_model_dir, policy={"floors": {"no_such_task": 0.5}}), output_dir=out)
    assert not (out / "mlflow.db").exists()
