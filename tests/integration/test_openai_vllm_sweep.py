"""`engine=openai-vllm` end to end on CPU: the exact server_command of conf/engine/openai-vllm.yaml
(`vllm serve {model_path} ...`) starts, through a `vllm` executable put first on PATH, a stand-in
that speaks vLLM's OpenAI API and Prometheus metrics (tests/vllm_standin.py; it is not vLLM: a
transformers model on CPU, one request computing at a time). selector's side is all real: the
sweep, the server process handling, the OpenAI engine (log-likelihoods from echoed prompt
log-probabilities, streamed chat), the load test and its /metrics scrape.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import psutil
import pytest

from tests.sweep_helpers import mlflow_runs, run_selector

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")


def fake_vllm(bin_dir: Path) -> Path:
    """A `vllm` on PATH that runs the stand-in with the arguments it was given."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "vllm"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{ROOT / "tests" / "vllm_standin.py"}" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


@pytest.mark.slow
def test_openai_vllm_sweep_scores_and_splits_load_through_the_server(tiny_setup: dict[str, Path]) -> None:
    fake_vllm(tiny_setup["base"] / "bin")
    env = {"PATH": f"{tiny_setup['base'] / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    common = ("model=tiny", "precision=fp32", "evalset.tasks=[sentiment,arithmetic]", "evalset.limit=3", "threads=1",
              "search=grid")
    served = run_selector(tiny_setup, *common, "engine=openai-vllm", "engine.ready_timeout_s=300",
                          "measure=load-quick", env=env, timeout=1200)
    assert served.returncode == 0, served.stdout[-3000:] + served.stderr[-5000:]
    (path,) = tiny_setup["out"].glob("sweeps/*/tiny/fp32/record.json")
    job, record = path.parent, json.loads(path.read_text())
    assert record["status"] == "completed", record.get("reason")
    assert record["config"]["engine"]["server_command"].startswith("vllm serve {model_path}")

    # The server that ran is the stand-in, started with the config's own flags.
    log = (job / "server.log").read_text().splitlines()
    assert log[0].startswith("$ ") and log[0].split()[1].endswith("vllm") and log[0].split()[2] == "serve"
    assert "--served-model-name variant --max-logprobs 20 --disable-uvicorn-access-log" in log[0]
    assert any(line.startswith("vllm stand-in: serving") for line in log)
    port = int(log[0].split("--port ")[1].split()[0])
    assert not any(c.laddr.port == port and c.status == psutil.CONN_LISTEN
                   for c in psutil.net_connections(kind="inet"))  # stopped with the variant

    # Accuracy came through the server: sentiment (multiple choice) as 3 items x 2 choices of
    # echoed prompt log-probabilities, arithmetic as 3 chat completions.
    assert sum(line == "request completions stream=False echo=True" for line in log) == 6
    assert sum(line == "request chat stream=False echo=False" for line in log) == 3
    assert {t: r["n"] for t, r in record["tasks"].items()} == {"sentiment": 3, "arithmetic": 3}

    # The load test streamed through it; each level's queue / compute split is the difference of
    # the server's own histograms over the level (nothing in the client can see its queue).
    assert sum(line == "request chat stream=True echo=False" for line in log) >= 12
    levels = record["perf"]["load"]
    assert [lv["concurrency"] for lv in levels] == [1, 2]
    for lv in levels:
        assert lv["errors"] == 0 and lv["requests"] == 6
        assert lv["queue_ms"]["n"] == lv["compute_ms"]["n"] == 6  # this level's requests, no more
        # Means are exact (histogram sums); the server's part lies inside what the client waited.
        assert 0 < lv["queue_ms"]["mean"] + lv["compute_ms"]["mean"] <= lv["e2e_ms"]["mean"]
        assert lv["batch_wait_ms"] is None  # the in-process batcher's figure; a server has none
    # (Whether two requests overlap at concurrency 2, so that one queues, depends on the client's
    # timing on a busy machine: the queue's size is not asserted, only that it is the server's.)
    # The report names where the split came from and diagnoses the level from the server's means.
    assert [lv["split_source"] for lv in levels] == ["vllm", "vllm"] and levels[0]["tail_ms"] == {}
    report = next(tiny_setup["out"].glob("sweeps/*/report/report.md")).read_text()
    split = report[report.index("### Where the time goes"):]
    assert "| vLLM /metrics |" in split and "of mean e2e" in split  # shares of the mean request

    _, (child,) = mlflow_runs(tiny_setup["out"])
    queue = {m.step: m.value for m in _history(tiny_setup["out"], child, "load/queue_ms_p50")}
    assert queue == pytest.approx({1: levels[0]["queue_ms"]["p50"], 2: levels[1]["queue_ms"]["p50"]})

    # The same variant in-process: the server's log-probabilities and greedy answers are the model's.
    local = run_selector(tiny_setup, *common, "engine=hf", "measure=quick", "tracker=none",
                         "output_dir=" + str(tiny_setup["base"] / "out-hf"))
    assert local.returncode == 0, local.stderr[-5000:]
    (local_path,) = (tiny_setup["base"] / "out-hf").glob("sweeps/*/tiny/fp32/samples.jsonl")
    by_server, in_process = _samples(job / "samples.jsonl"), _samples(local_path)
    assert by_server.keys() == in_process.keys() and len(by_server) == 6
    for key, sample in by_server.items():
        if key[0] == "sentiment":
            for choice, value in sample["extra"]["logprobs"].items():
                assert value == pytest.approx(in_process[key]["extra"]["logprobs"][choice], abs=1e-3)
        assert sample["output"] == in_process[key]["output"]


def _samples(path: Path) -> dict[tuple[str, str], dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return {(r["task"], r["id"]): r for r in rows}


def _history(out: Path, run, name: str):  # type: ignore[no-untyped-def]
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}").get_metric_history(run.info.run_id, name)
