"""Fault injection: each failure is recorded with its stage and reason, nothing measured is lost,
and the sweep goes on (or, when killed, resumes to exactly one completed child run per variant).

The faults are the worker process's and the sweep's, not the model's: the sweeps run on
engine=scripted-tiny (tests/scripted.py), whose variants pass through the same stages (load,
evaluate, fidelity, measure) in their own worker processes without loading a model. A sweep that is
signalled, or runs beside another, is a process of its own; the others run the command line's entry
in this process (tests/sweep_helpers.py run_in_process)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from tests.sweep_helpers import QUICK, mlflow_runs, run_in_process, run_selector, start_selector


def by_name(children: list) -> dict:
    return {c.info.run_name: c for c in children}


def record_of(out: Path, name: str) -> dict:
    """The newest record.json written for a variant under any sweep folder."""
    model, precision = name.split("/")
    paths = sorted((out / "sweeps").glob(f"*/{model}/{precision}/record.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(paths[-1].read_text())


def wait_for_stage(out: Path, name: str, stage: str, timeout: float = 300) -> None:
    model, precision = name.split("/")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for f in (out / "sweeps").glob(f"*/{model}/{precision}/stage"):
            if f.read_text().strip() == stage:
                return
        time.sleep(0.5)
    raise AssertionError(f"{name} never reached stage {stage}")


@pytest.mark.quant("bitsandbytes")  # tiny/int8 must complete beside the broken variants
def test_raise_segfault_and_hang_are_recorded_and_the_sweep_goes_on(tiny_setup: dict[str, Path],
                                                                    scripted: str) -> None:
    faults = "tiny/fp32@measure:raise,tiny/bf16@load:segfault,tiny/fp16@measure:hang"
    # fp16 hangs in measure until the time limit: a scripted worker reaches measure in seconds
    result = run_in_process(tiny_setup, "model=tiny", scripted, "precision=fp32,bf16,fp16,int8", "time_limit_s=30",
                            *QUICK, env={"SELECTOR_INJECT_FAULT": faults})
    assert result.returncode == 0, result.stderr[-4000:]
    parents, children = mlflow_runs(tiny_setup["out"])
    runs = by_name(children)
    assert set(runs) == {"tiny/fp32", "tiny/bf16", "tiny/fp16", "tiny/int8"}
    assert parents[0].info.status == "FINISHED"

    raised = runs["tiny/fp32"]
    assert raised.info.status == "FAILED" and raised.data.tags["selector.failed_stage"] == "measure"
    assert "InjectedFault" in raised.data.tags["selector.reason"]
    # Accuracy was measured before the fault: it is kept, in MLflow and in the record.
    assert raised.data.metrics["n/sentiment"] == 2
    rec = record_of(tiny_setup["out"], "tiny/fp32")
    assert rec["status"] == "failed" and rec["error"]["type"] == "InjectedFault"
    assert "Traceback" in rec["error"]["log_tail"] and set(rec["tasks"]) == {"sentiment", "arithmetic"}

    crashed = record_of(tiny_setup["out"], "tiny/bf16")
    assert crashed["error"]["type"] == "WorkerKilled" and "SIGSEGV" in crashed["reason"]
    assert crashed["error"]["stage"] == "load" and "Fatal Python error" in crashed["error"]["log_tail"]
    assert runs["tiny/bf16"].info.status == "FAILED"

    hung = record_of(tiny_setup["out"], "tiny/fp16")
    assert hung["error"]["type"] == "TimeLimitExceeded" and hung["error"]["stage"] == "measure"
    assert set(hung["tasks"]) == {"sentiment", "arithmetic"}  # partial results survive the kill

    assert runs["tiny/int8"].data.tags["selector.status"] == "completed"
    report = (Path(parents[0].data.params["sweep_dir"]) / "report" / "report.md").read_text()
    assert "TimeLimitExceeded" in report and "WorkerKilled" in report and "InjectedFault" in report


def test_memory_limit_turns_runaway_allocation_into_a_recorded_failure(tiny_setup: dict[str, Path],
                                                                       scripted: str) -> None:
    result = run_in_process(tiny_setup, "model=tiny", scripted, "precision=fp32", "memory_limit_gb=6", *QUICK,
                            env={"SELECTOR_INJECT_FAULT": "tiny/fp32@evaluate:oom"})
    assert result.returncode == 0, result.stderr[-4000:]
    rec = record_of(tiny_setup["out"], "tiny/fp32")
    assert rec["status"] == "failed" and rec["error"]["type"] == "MemoryError"
    assert rec["error"]["stage"] == "evaluate"


def test_sigkill_mid_variant_then_resume_leaves_one_completed_run_per_variant(tiny_setup: dict[str, Path],
                                                                              scripted: str) -> None:
    args = ("model=tiny", scripted, "precision=fp32,bf16", *QUICK)
    proc = start_selector(tiny_setup, *args, env={"SELECTOR_INJECT_FAULT": "tiny/bf16@evaluate:hang"})
    try:
        wait_for_stage(tiny_setup["out"], "tiny/bf16", "evaluate")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    time.sleep(1)  # the worker dies with its parent (PR_SET_PDEATHSIG)

    again = run_selector(tiny_setup, *args)
    assert again.returncode == 0, again.stderr[-4000:]
    assert "already measured" in again.stdout + again.stderr  # fp32 finished before the kill
    parents, children = mlflow_runs(tiny_setup["out"])
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"  # the same sweep, resumed
    completed = [c for c in children if c.data.tags["selector.status"] == "completed"]
    assert sorted(c.info.run_name for c in completed) == ["tiny/bf16", "tiny/fp32"]
    killed = [c for c in children if c.info.status == "KILLED"]
    assert [c.info.run_name for c in killed] == ["tiny/bf16"]


def test_sigint_stops_cleanly_and_marks_runs_killed(tiny_setup: dict[str, Path], scripted: str) -> None:
    proc = start_selector(tiny_setup, "model=tiny", scripted, "precision=fp32", *QUICK,
                          env={"SELECTOR_INJECT_FAULT": "tiny/fp32@evaluate:hang"})
    wait_for_stage(tiny_setup["out"], "tiny/fp32", "evaluate")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=240)  # closing the runs takes seconds; a busy machine (2 test workers) more
    assert proc.returncode == 130, err[-3000:]
    assert "run the same command again to resume" in err
    parents, children = mlflow_runs(tiny_setup["out"])
    assert parents[0].info.status == "KILLED" and children[0].info.status == "KILLED"


def test_concurrent_sweeps_share_one_store(tiny_setup: dict[str, Path], scripted: str) -> None:
    a = start_selector(tiny_setup, "model=tiny", scripted, "precision=fp32", *QUICK)
    b = start_selector(tiny_setup, "model=tiny", scripted, "precision=bf16", *QUICK)
    for proc in (a, b):
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
    parents, children = mlflow_runs(tiny_setup["out"])
    assert len(parents) == 2 and all(p.info.status == "FINISHED" for p in parents)
    for parent in parents:
        mine = [c for c in children if c.data.tags["mlflow.parentRunId"] == parent.info.run_id]
        assert len(mine) == 1 and mine[0].data.tags["selector.status"] == "completed"


def test_secrets_in_the_environment_never_reach_mlflow_or_logs(tiny_setup: dict[str, Path],
                                                               scripted: str) -> None:
    secret = "hf_NotARealTokenButSecret1234567890"
    result = run_in_process(tiny_setup, "model=tiny", scripted, "precision=fp32", *QUICK,
                            env={"HF_TOKEN": secret, "OPENAI_API_KEY": secret, "MY_PASSWORD": secret})
    assert result.returncode == 0, result.stderr[-3000:]
    assert secret not in result.stdout + result.stderr
    db = sqlite3.connect(tiny_setup["out"] / "mlflow.db")
    for (table,) in db.execute("select name from sqlite_master where type='table'").fetchall():
        assert secret not in repr(db.execute(f"select * from {table}").fetchall()), table
    for path in tiny_setup["out"].rglob("*"):
        if path.is_file() and path.suffix != ".db":
            assert secret.encode() not in path.read_bytes(), path
