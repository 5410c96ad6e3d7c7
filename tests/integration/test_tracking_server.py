"""A shared MLflow tracking server, for real: `mlflow server` started here on 127.0.0.1 (a free port,
SQLite backend, proxied artifact store). A sweep records into it and `select --mlflow-run` reads it
back; transient 503s are retried; a sweep whose server is down records locally, says how to sync,
and `python -m selector sync` copies it to the server once it is up (and copies nothing twice).

The server is real; what is logged into it is not about a model, so the sweeps run on
engine=scripted-tiny (tests/scripted.py), and every command runs the command line's entry in this
process (tests/sweep_helpers.py cli_in_process)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest

from selector.config import TrackerConfig
from tests.scripted import ENGINE, write_scripted_engine
from tests.sweep_helpers import cli_in_process
from tests.tiny import write_model_config

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    base = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    log = (base / "server.log").open("w")
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{base / 'mlflow.db'}",
           "--serve-artifacts", "--artifacts-destination", str(base / "artifacts"),
           "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=base)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 240
    while True:
        assert proc.poll() is None, (base / "server.log").read_text()[-3000:]
        try:
            if urllib.request.urlopen(f"{url}/health", timeout=2).status == 200:
                break
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        assert time.monotonic() < deadline, "mlflow server did not answer /health within 240 s"
        time.sleep(1)
    yield {"url": url, "artifacts": base / "artifacts"}
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)  # the server's own group (uvicorn and its worker)
            proc.wait(timeout=30)
            break
        except ProcessLookupError:
            break
        except subprocess.TimeoutExpired:
            continue
    log.close()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("tiny-tracking")
    write_model_config(base / "conf", "tiny", tiny_model_dir)
    write_scripted_engine(base / "conf")
    return {"base": base, "conf": base / "conf", "cache": base / "cache"}


def run_selector(tiny: dict[str, Path], out: Path, *overrides: str) -> subprocess.CompletedProcess:
    return cli_in_process(f"hydra.searchpath=[file://{tiny['conf']}]", f"output_dir={out}",
                          f"cache_dir={tiny['cache']}", "model=tiny", f"engine={ENGINE}", "measure=quick",
                          "evalset.limit=2", "search=grid", *overrides)


def runs_of(uri: str, experiment: str = "selector") -> tuple[list, list]:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], max_results=100) if exp else []
    return ([r for r in runs if r.data.tags.get("selector.role") == "sweep"],
            [r for r in runs if r.data.tags.get("selector.role") == "variant"])


def test_sweep_records_into_the_server_and_select_reads_it_back(server: dict, tiny: dict[str, Path]) -> None:
    done = run_selector(tiny, tiny["base"] / "out-server", "precision=fp32,bf16",
                        f"tracker.tracking_uri={server['url']}")
    assert done.returncode == 0, done.stderr[-6000:]
    parents, children = runs_of(server["url"])
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert sorted(c.info.run_name for c in children) == ["tiny/bf16", "tiny/fp32"]
    assert all(c.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for c in children)
    # Artifacts went through the server into its artifact store, not into the sweep's folder.
    stored = list(server["artifacts"].rglob("record.json"))
    assert len(stored) == 2 and not (tiny["base"] / "out-server" / "mlartifacts").exists()
    assert not (tiny["base"] / "out-server" / "mlflow.db").exists()

    sel = cli_in_process("select", "--mlflow-run", parents[0].info.run_id, "--tracking-uri", server["url"],
                         "--out", str(tiny["base"] / "sel"))
    assert sel.returncode == 0, sel.stderr[-4000:]
    report = json.loads((tiny["base"] / "sel" / "report.json").read_text())
    assert {r["variant"]["precision"] for r in report["records"]} == {"fp32", "bf16"}


class FlakyProxy:
    """Answers the first `failures` requests with 503, then forwards to the real server."""

    def __init__(self, target: str, failures: int) -> None:
        self.target, self.failures, self.seen_503 = target, failures, 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _relay(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if proxy.seen_503 < proxy.failures:
                    proxy.seen_503 += 1
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                req = urllib.request.Request(proxy.target + self.path, data=body or None, method=self.command,
                                             headers={k: v for k, v in self.headers.items() if k.lower() != "host"})
                try:
                    with urllib.request.urlopen(req, timeout=60) as resp:
                        status, headers, data = resp.status, resp.headers, resp.read()
                except urllib.error.HTTPError as e:
                    status, headers, data = e.code, e.headers, e.read()
                self.send_response(status)
                for k, v in headers.items():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _relay

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_transient_503s_are_retried_and_a_dead_server_falls_back(server: dict, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from selector.trackers.mlflow import MlflowTracker

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")  # keep the waits short (an int)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "7")  # the tracker sets it from tracker.retries
    flaky = FlakyProxy(server["url"], failures=2)
    try:
        tracker = MlflowTracker(TrackerConfig(tracking_uri=flaky.url, retries=3), "flaky", tmp_path)
        parent = tracker.start_sweep("k1", "flaky sweep", {"a": 1}, {"selector.status": "running"})
        assert tracker.uri == flaky.url and tracker.fallback_from is None
        assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "3"
        assert flaky.seen_503 == 2  # both failures were absorbed by retries
        assert runs_of(server["url"], "flaky")[0][0].info.run_id == parent
    finally:
        flaky.close()

    always = FlakyProxy(server["url"], failures=10**6)
    try:
        fallback = MlflowTracker(TrackerConfig(tracking_uri=always.url, retries=1), "flaky", tmp_path / "fb")
    finally:
        always.close()
    assert fallback.fallback_from == always.url and fallback.uri.startswith("sqlite:///")
    assert always.seen_503 == 2  # one attempt + one retry, then the local store


def test_down_server_records_locally_then_sync_copies_it(server: dict, tiny: dict[str, Path]) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    out = tiny["base"] / "out-down"
    done = run_selector(tiny, out, "precision=bf16", "experiment=offline", f"tracker.tracking_uri={dead}",
                        "tracker.retries=1")
    assert done.returncode == 0, done.stderr[-6000:]
    local = f"sqlite:///{out / 'mlflow.db'}"
    said = done.stdout + done.stderr  # Hydra's log handler writes to stdout
    assert f"MLflow server {dead} is unreachable" in said
    assert f"python -m selector sync --from {local} --to {dead}" in said
    parents, children = runs_of(local, "offline")
    assert len(parents) == 1 and [c.info.run_name for c in children] == ["tiny/bf16"]
    assert children[0].data.tags["mlflow.parentRunId"] == parents[0].info.run_id

    sync = ["sync", "--from", local, "--to", server["url"]]
    first = cli_in_process(*sync)
    assert first.returncode == 0, first.stderr[-4000:]
    assert "copied 2 run(s) of offline" in first.stdout
    s_parents, s_children = runs_of(server["url"], "offline")
    assert len(s_parents) == 1 and len(s_children) == 1
    child, parent = s_children[0], s_parents[0]
    assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id  # re-pointed to the copied parent
    assert child.data.tags["selector.synced_from"] == children[0].info.run_id
    assert child.data.metrics == children[0].data.metrics and child.data.params == children[0].data.params
    assert child.info.status == "FINISHED" and parent.info.status == "FINISHED"

    from selector.trackers.mlflow import MlflowTracker

    records = MlflowTracker(TrackerConfig(tracking_uri=server["url"]), "offline", tiny["base"]).load_records(parent.info.run_id)
    assert [r.name for r in records] == ["tiny/bf16"] and records[0].status == "completed"

    again = cli_in_process(*sync)
    assert again.returncode == 0 and "copied 0 run(s)" in again.stdout and "2 already there" in again.stdout
    assert len(runs_of(server["url"], "offline")[1]) == 1
