"""Faults of a served variant that a real vLLM cannot be made to produce on demand, played by
tests/vllm_standin.py (NOT vLLM: a stand-in speaking its API and /metrics, started through
engine=openai-transformers with its engine.server_command): a server that dies in the middle of the
load test, and /metrics that is not Prometheus text. The happy paths run against real vLLM in test_vllm_engine.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.sweep_helpers import run_selector

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

COMMON = ("model=tiny", "precision=fp32", "evalset.tasks=[sentiment,arithmetic]", "evalset.limit=3", "threads=1",
          "search=grid", "engine=openai-transformers", "engine.served_model=variant",
          "engine.ready_timeout_s=300", "measure=load-quick", "tracker=none")


def standin(*fault: str) -> str:
    command = (f"{sys.executable} {ROOT / 'tests' / 'vllm_standin.py'} serve {{model_path}} --host {{host}} "
               f"--port {{port}} --dtype {{dtype}} --served-model-name {{served_model}} --max-logprobs 20 {' '.join(fault)}")
    return f"engine.server_command='{command.strip()}'"


@pytest.mark.slow  # ~75 s on 2 busy cores
def test_a_server_that_dies_during_the_load_test_fails_the_variant_and_keeps_its_scores(
        tiny_setup: dict[str, Path]) -> None:
    # Stand-in, because a real vLLM cannot be made to exit at a chosen request. Served before the load
    # test: latency (1 warm-up + 3 runs) and throughput at batch 4 (a warm-up batch + a timed one),
    # then the load test's warm-up and the 6 requests of c=1; it exits when c=2's first arrives.
    result = run_selector(tiny_setup, *COMMON, standin("--die-after-streams", str(4 + 8 + 1 + 6)), timeout=900)
    assert result.returncode == 0, result.stderr[-5000:]  # the sweep goes on and ends
    (path,) = tiny_setup["out"].glob("sweeps/*/tiny/fp32/record.json")
    record = json.loads(path.read_text())
    assert record["status"] == "failed" and record["error"]["stage"] == "measure"
    assert record["error"]["type"] == "ServerDiedError"
    assert "the server exited with status 3 during the load test (first failed level: c=2" in record["reason"]
    assert "dying as asked, at streamed request 20" in record["error"]["message"]  # the server's log tail
    # Nothing already measured is lost: the tasks, latency and throughput, and the level that completed.
    assert {t: r["n"] for t, r in record["tasks"].items()} == {"sentiment": 3, "arithmetic": 3}
    assert record["perf"]["latency"]["e2e_ms"]["n"] == 3 and record["perf"]["throughput"][0]["batch_size"] == 4
    levels = record["perf"]["load"]
    assert levels[0]["concurrency"] == 1 and levels[0]["errors"] == 0
    assert levels[1]["concurrency"] == 2 and levels[1]["errors"] == levels[1]["requests"]


@pytest.mark.slow  # ~75 s on 2 busy cores
def test_malformed_metrics_leave_the_split_empty_and_say_why(tiny_setup: dict[str, Path]) -> None:
    # Stand-in, because a real vLLM's /metrics is always well-formed.
    result = run_selector(tiny_setup, *COMMON, standin("--malformed-metrics"), timeout=900)
    assert result.returncode == 0, result.stderr[-5000:]
    (path,) = tiny_setup["out"].glob("sweeps/*/tiny/fp32/record.json")
    record = json.loads(path.read_text())
    assert record["status"] == "completed", record.get("reason")
    for lv in record["perf"]["load"]:
        assert lv["errors"] == 0 and lv["e2e_ms"]["n"] == 6  # the client's figures stand
        assert lv["queue_ms"] is None and lv["compute_ms"] is None and lv["split_source"] == ""
        assert "Prometheus" in lv["split_note"]
