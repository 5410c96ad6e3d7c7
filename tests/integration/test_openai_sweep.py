"""`python -m selector ... engine=openai-transformers measure=load-quick` on the tiny model: the
harness starts a server for the variant, evaluates and load-tests through it, stops it, and MLflow
gets the load levels with the concurrency as the step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.tiny import build_tiny_llama, write_model_config

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("fastapi")
pytest.importorskip("openai")


@pytest.mark.slow
def test_sweep_serves_evaluates_and_load_tests_through_a_server(tmp_path: Path) -> None:
    model_dir = build_tiny_llama(tmp_path / "tiny-model")
    write_model_config(tmp_path / "conf", "tiny", model_dir)
    out = tmp_path / "out"
    cmd = [
        sys.executable, "-m", "selector", f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
        f"output_dir={out}", f"cache_dir={tmp_path / 'cache'}", "model=tiny", "precision=fp32",
        "engine=openai-transformers", "engine.ready_timeout_s=300", "measure=load-quick",
        "evalset.tasks=[arithmetic,extraction]", "evalset.limit=3", "search=grid", "measure.load.slo.e2e_ms=600000",
    ]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]

    (record_path,) = list(out.glob("sweeps/*/tiny/fp32/record.json"))
    job = record_path.parent
    record = json.loads(record_path.read_text())
    assert record["status"] == "completed", record.get("reason")
    assert set(record["tasks"]) == {"arithmetic", "extraction"}  # scored through the server
    assert len((job / "samples.jsonl").read_text().splitlines()) == 6
    levels = record["perf"]["load"]
    assert [lv["concurrency"] for lv in levels] == [1, 2]
    for lv in levels:
        assert lv["requests"] == 6 and lv["errors"] == 0
        assert lv["ttft_ms"]["p50"] <= lv["e2e_ms"]["p50"] <= lv["e2e_ms"]["p99"]
        assert lv["goodput_rps"] == pytest.approx(lv["request_throughput"])
    # Measured through the server it starts, as an in-process variant is: latency, throughput, memory.
    perf = record["perf"]
    assert perf["latency"]["e2e_ms"]["n"] == 3 and [t["batch_size"] for t in perf["throughput"]] == [4]
    memory = record["memory"]
    assert memory["weights_source"] == "checkpoint" and memory["weight_bytes"] > 0  # its files, at fp32
    assert memory["footprint"]["rss_bytes"] >= memory["weight_bytes"]
    assert memory["kv_pool_bytes"] is None and memory["serving"]["rss_bytes"] is None  # no KV accounting to read
    assert record["fidelity"] is None  # transformers serve returns no prompt log-probabilities
    assert record["timings_s"]["load"] > 0 and record["timings_s"]["measure"] > 0

    log = (job / "server.log").read_text()
    assert log.startswith("$ ") and "--host 127.0.0.1" in log.splitlines()[0]
    port = int(log.splitlines()[0].split("--port ")[1].split()[0])
    assert not any(c.laddr.port == port and c.status == psutil.CONN_LISTEN
                   for c in psutil.net_connections(kind="inet"))  # the server is gone

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name("selector")
    (child,) = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("selector.role") == "variant"]
    assert child.data.params["engine"] == "command"
    history = client.get_metric_history(child.info.run_id, "load/e2e_ms_p95")
    assert sorted(m.step for m in history) == [1, 2]
    assert {m.step: m.value for m in history}[2] == pytest.approx(levels[1]["e2e_ms"]["p95"])
    assert "accuracy/arithmetic" in child.data.metrics


@pytest.mark.slow
def test_a_sweep_attached_to_a_running_server(tmp_path: Path) -> None:
    """engine=openai: a server someone else started (here the vLLM stand-in, NOT vLLM), attached by
    URL. Evaluated and timed through it; its memory is not this machine's to read, so the weights
    are plan's estimate and said so."""
    from selector.engines.served.process import LOOPBACK, ServerProcess, free_port

    model_dir = build_tiny_llama(tmp_path / "tiny-model")
    write_model_config(tmp_path / "conf", "tiny", model_dir)
    port = free_port()
    server = ServerProcess([sys.executable, str(ROOT / "tests" / "vllm_standin.py"), "serve", str(model_dir),
                            "--host", LOOPBACK, "--port", str(port), "--dtype", "float32", "--served-model-name",
                            "mine", "--disable-uvicorn-access-log"],
                           f"http://{LOOPBACK}:{port}", tmp_path / "standin.log", ready_timeout_s=300)
    out = tmp_path / "out"
    with server:
        cmd = [sys.executable, "-m", "selector", f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
               f"output_dir={out}", f"cache_dir={tmp_path / 'cache'}", "model=tiny", "precision=fp32",
               "engine=openai", f"engine.base_url=http://{LOOPBACK}:{port}/v1", "measure=quick",
               "evalset.tasks=[arithmetic]", "evalset.limit=3", "search=grid"]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, cwd=ROOT)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
        assert server.alive()  # someone else's server: the harness leaves it running
    (record_path,) = list(out.glob("sweeps/*/tiny/fp32/record.json"))
    record = json.loads(record_path.read_text())
    assert record["status"] == "completed", record.get("reason")
    assert record["tasks"]["arithmetic"]["n"] == 3
    assert record["perf"]["latency"]["e2e_ms"]["n"] == 3  # timed through the attached server
    memory = record["memory"]
    assert memory["weights_source"] == "plan" and memory["weight_bytes"] > 0 and memory["footprint"] is None
    assert "engine=openai attached to" in (record_path.parent / "worker.log").read_text()
    requests = (tmp_path / "standin.log").read_text()
    assert requests.count("request completions") >= 3  # the eval items and the timed requests came to it
