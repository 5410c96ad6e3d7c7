"""The whole product on a tiny real model: `python -m selector` as a user runs it, into a temporary
MLflow store, then a second run that resumes (measures nothing again)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from selector.tasks.sandbox import isolation
from tests.sweep_helpers import ROOT, cli_in_process, mlflow_runs, run_selector


@pytest.mark.slow  # two sweeps: 173 s on 2 shared cores
def test_sweep_end_to_end_then_resume(tiny_setup: dict[str, Path]) -> None:
    first = run_selector(tiny_setup, "model=tiny", "precision=fp32,bf16", "measure=quick", "evalset.limit=3", "search=grid",
                         "measure.noise_floor.repeats=1")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-5000:]

    parents, children = mlflow_runs(tiny_setup["out"])
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    parent = parents[0]
    assert sorted(c.info.run_name for c in children) == ["tiny/bf16", "tiny/fp32"]
    for child in children:
        m, tags, params = child.data.metrics, child.data.tags, child.data.params
        assert tags["mlflow.parentRunId"] == parent.info.run_id
        assert tags["selector.status"] == "completed" and child.info.status == "FINISHED"
        assert params["model"] == "tiny" and params["precision"] in ("fp32", "bf16")
        assert params["code_sandbox"] == ", ".join(isolation())  # the layers that held the code task's programs
        for task in ("sentiment", "extraction", "arithmetic", "code"):
            assert 0.0 <= m[f"accuracy/{task}"] <= 1.0
            assert m[f"accuracy/{task}/ci_low"] <= m[f"accuracy/{task}"] <= m[f"accuracy/{task}/ci_high"]
            assert m[f"n/{task}"] == 3
        assert 0 < m["latency/ttft_ms_p50"] <= m["latency/ttft_ms_p99"]
        assert m["latency/e2e_ms_p50"] >= m["latency/ttft_ms_p50"]
        assert m["memory/weight_gb"] > 0 and m["memory/peak_rss_gb"] > 0
    weights = {c.data.params["precision"]: c.data.metrics["memory/weight_gb"] for c in children}
    assert weights["bf16"] == pytest.approx(weights["fp32"] / 2, rel=0.01)  # 2 bytes vs 4 per weight

    sweep_dir = Path(parent.data.params["sweep_dir"])
    report = json.loads((sweep_dir / "report" / "report.json").read_text())
    assert {r["variant"]["precision"] for r in report["records"]} == {"fp32", "bf16"}
    assert "- code_sandbox: " + ", ".join(isolation()) in (sweep_dir / "report" / "report.md").read_text()
    # The reference (largest model, highest precision) was evaluated again at another batch size.
    by_precision = {r["variant"]["precision"]: r for r in report["records"]}
    spread = by_precision["fp32"]["config"]["noise_floor"]
    assert set(spread) == {"sentiment", "extraction", "arithmetic", "code"}
    assert all(0.0 <= v <= 1.0 for v in spread.values())
    assert "noise_floor" not in by_precision["bf16"]["config"]
    assert report["selection"]["noise_floor"] == spread
    samples = (sweep_dir / "tiny" / "fp32" / "samples.jsonl").read_text().splitlines()
    assert len(samples) == 12  # 4 tasks x 3 items, each with prompt, output, target, score
    assert {"prompt", "output", "target", "score"} <= set(json.loads(samples[0]))
    assert "Report:" in first.stdout
    # The console holds selector's own lines; libraries' output (transformers' loading bar) is in
    # each variant's worker.log, with everything else the worker printed.
    console = first.stdout + first.stderr
    assert "stage evaluate: tiny/fp32" in console and "Loading weights" not in console
    worker_log = (sweep_dir / "tiny" / "fp32" / "worker.log").read_text()
    assert "stage evaluate: tiny/fp32" in worker_log and "Loading weights" in worker_log

    # Same sweep again: every variant is already measured, so nothing runs and MLflow still
    # holds exactly one completed child per variant.
    again = run_selector(tiny_setup, "model=tiny", "precision=fp32,bf16", "measure=quick", "evalset.limit=3", "search=grid",
                         "measure.noise_floor.repeats=1")
    assert again.returncode == 0, again.stderr[-5000:]
    assert "already measured" in again.stdout + again.stderr
    parents, children = mlflow_runs(tiny_setup["out"])
    assert len(parents) == 1
    assert sorted(c.info.run_name for c in children) == ["tiny/bf16", "tiny/fp32"]


@pytest.mark.fast
def test_unknown_precision_is_a_usage_error() -> None:
    """A process of its own, as a user starts it: the exit code and no traceback on its stderr (the
    other bad-input tests run the same entry in the test's process: tests/sweep_helpers.py)."""
    result = subprocess.run([sys.executable, "-m", "selector", "precision=bf61"], capture_output=True,
                            text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 2
    suggested = re.search(r"Did you mean (\S+)\?", result.stderr)
    assert suggested is not None and suggested.group(1) == "bf16", result.stderr[-2000:]
    assert "Traceback" not in result.stderr


@pytest.mark.fast
def test_sweep_without_gpu_fails_fast(tiny_setup: dict[str, Path]) -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the Qwen sweep could start here")
    result = cli_in_process("+sweep=qwen", f"output_dir={tiny_setup['base'] / 'qwen-out'}")
    assert result.returncode == 2, result.stderr[-3000:]
    assert "needs a CUDA GPU" in result.stderr and "Traceback" not in result.stderr
    assert not (tiny_setup["base"] / "qwen-out" / "mlflow.db").exists()  # nothing written to MLflow
