"""Variants as Ray tasks on a real Ray cluster this test starts on this machine (`ray start --head`
on 127.0.0.1 only), then the same two variants one after the other with Hydra's local launcher.

The Ray workers start in a directory of their own and without the sweep's environment variable, as
on a multi-node cluster: they find the parent MLflow run through sweep.json in the sweep folder.
Both wall times are printed (run with -s to see them). The tiny model's variants run on
engine=scripted-tiny (tests/scripted.py): the launcher is under test, not a model; the vLLM test at
the end starts real vLLM servers in the Ray tasks. One 2-CPU Ray head serves the whole module.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from tests.scripted import ENGINE, write_scripted_engine
from tests.tiny import write_model_config

# Ray 2.60 turns on token auth for `ray start` when ~/.ray/auth_token exists (any earlier local
# ray.init() writes one), while a driver joining by address does not: the same explicit mode for both.
# Ray replaces a loopback node address with the machine's own IP unless clusters are off
# (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, its single-machine mode): then every process of the test's
# cluster, this one included, talks over 127.0.0.1. Ray reads it when imported: set before that.
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
os.environ.update(RAY_ENV)
pytest.importorskip("ray")
pytest.importorskip("hydra_plugins.hydra_ray_launcher")

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


@contextmanager
def ray_head(num_cpus: int = 2) -> Iterator[str]:
    """A Ray head node in its own process group; stopped (and only it) when the block ends."""
    port = free_port()
    # Ray's unix socket paths must stay under ~107 characters: a short temp dir, not tmp_path.
    temp = Path(tempfile.mkdtemp(prefix="ray"))
    log = temp / "head.log"
    env = {**os.environ, **RAY_ENV}
    cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--node-ip-address=127.0.0.1",
           f"--port={port}", f"--num-cpus={num_cpus}", "--num-gpus=0", "--include-dashboard=false",
           "--disable-usage-stats", f"--temp-dir={temp}", "--object-store-memory=100000000", "--block"]
    with log.open("w") as out:
        head = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=temp)
    try:
        deadline = time.monotonic() + 180
        while "Ray runtime started" not in log.read_text():
            assert head.poll() is None, f"ray start exited with {head.returncode}:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"Ray did not start within 180 s:\n{log.read_text()[-3000:]}"
            time.sleep(1)
        assert "Local node IP: 127.0.0.1" in re.sub(r"\x1b\[[0-9;]*m", "", log.read_text())
        yield f"127.0.0.1:{port}"
    finally:
        # Ray's graceful stop waits on its workers for half a minute on a busy machine; the test
        # needs none of it: 10 s, then the whole group is killed.
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 30)):
            try:
                os.killpg(head.pid, sig)  # the head's own group: its GCS, raylet and workers
            except ProcessLookupError:
                break
            try:
                head.wait(timeout=wait)
                time.sleep(2)  # its children leave the group a moment after it exits
            except subprocess.TimeoutExpired:
                continue
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("ray")
    write_model_config(base / "conf", "tiny", tiny_model_dir)
    write_scripted_engine(base / "conf")
    return {"base": base, "conf": base / "conf", "cache": base / "cache"}


def run_sweep(tiny: dict[str, Path], out: Path, *extra: str, precision: str = "fp32,bf16",
              search: str = "grid", model: str = "tiny",
              engine: str = ENGINE) -> tuple[subprocess.CompletedProcess, float]:
    cmd = [sys.executable, "-m", "selector", f"hydra.searchpath=[file://{tiny['conf']}]", f"output_dir={out}",
           f"cache_dir={tiny['cache']}", f"model={model}", f"engine={engine}", f"precision={precision}",
           "measure=quick", "evalset.limit=2", f"search={search}", "threads=1", *extra]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env={**os.environ, **RAY_ENV})
    return done, time.perf_counter() - t0


def mlflow_runs(out: Path) -> tuple[list, list]:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name("selector")
    runs = client.search_runs([exp.experiment_id], max_results=100)
    return ([r for r in runs if r.data.tags.get("selector.role") == "sweep"],
            [r for r in runs if r.data.tags.get("selector.role") == "variant"])


def test_two_variants_as_ray_tasks_reach_mlflow(tiny: dict[str, Path], cluster: str) -> None:
    ray_done, ray_wall = run_sweep(tiny, tiny["base"] / "out-ray", "hydra/launcher=ray_cpus",
                                   f"hydra.launcher.ray.init.address={cluster}")
    assert ray_done.returncode == 0, ray_done.stdout[-2000:] + ray_done.stderr[-6000:]
    assert "Ray Launcher is launching 2 jobs" in ray_done.stdout + ray_done.stderr

    parents, children = mlflow_runs(tiny["base"] / "out-ray")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert sorted(c.info.run_name for c in children) == ["tiny/bf16", "tiny/fp32"]
    for child in children:
        assert child.data.tags["mlflow.parentRunId"] == parents[0].info.run_id  # found via sweep.json
        assert child.data.tags["selector.status"] == "completed" and child.info.status == "FINISHED"
        assert child.data.metrics["n/sentiment"] == 2
    # The two variants ran at the same time, each in its own Ray task.
    a, b = sorted(children, key=lambda r: r.info.start_time)
    assert b.info.start_time < a.info.end_time, "the Ray tasks ran one after the other"
    sweep_dir = Path(parents[0].data.params["sweep_dir"])
    report = json.loads((sweep_dir / "report" / "report.json").read_text())
    assert {r["variant"]["precision"] for r in report["records"]} == {"fp32", "bf16"}
    print(f"\nwall time, 2 variants (tiny model, evalset.limit=2, measure=quick, threads=1): "
          f"Ray tasks on a local 2-CPU cluster {ray_wall:.1f} s")


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """One 2-CPU Ray head for every test of the module (starting one costs seconds of a busy machine)."""
    with ray_head(num_cpus=2) as address:
        yield address


def compose_width(monkeypatch: pytest.MonkeyPatch, *overrides: str):  # type: ignore[no-untyped-def]
    """search_width for the config `python -m selector <overrides>` composes, counted in this process
    the way the launcher reaches Ray; Ray is left again afterwards."""
    import ray
    from hydra import compose, initialize_config_dir

    from selector.config import CONF_DIR
    from selector.sweep.width import search_width

    for key, value in RAY_ENV.items():
        monkeypatch.setenv(key, value)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides), return_hydra_config=True)
    try:
        return search_width(cfg)
    finally:
        ray.shutdown()


def test_width_is_what_the_ray_cluster_fits(cluster: str, monkeypatch: pytest.MonkeyPatch) -> None:
    join = f"hydra.launcher.ray.init.address={cluster}"
    width = compose_width(monkeypatch, "hydra/launcher=ray_cpus", join)
    assert (width.workers, width.source, width.hint) == (2, "Ray cluster: 2 CPUs / 1 CPU per variant", "")
    # ray_gpus asks 4 CPUs and a GPU: none fits on this cluster, so one at a time, with a warning
    width = compose_width(monkeypatch, "hydra/launcher=ray_gpus", join)
    assert width.workers == 1
    assert width.source == "Ray cluster: 2 CPUs / 4 CPUs per variant, 0 GPUs / 1 GPU per variant"
    assert "less CPU, GPU than one variant asks" in width.hint
    assert compose_width(monkeypatch, "hydra/launcher=ray_cpus", join, "search.workers=5").workers == 5


def test_width_of_a_ray_instance_the_launcher_starts_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """No cluster to join: the launcher starts Ray in its own process, and so does the count (the
    launcher then finds it running). address=local: never some other cluster on this machine."""
    width = compose_width(monkeypatch, "hydra/launcher=ray_cpus", "hydra.launcher.ray.init.address=local",
                          "+hydra.launcher.ray.init.num_cpus=3", "hydra.launcher.ray.remote.num_cpus=1.5")
    assert (width.workers, width.source) == (2, "Ray cluster: 3 CPUs / 1.5 CPUs per variant")


def test_adaptive_search_on_ray_runs_waves_as_wide_as_the_cluster(tiny: dict[str, Path], cluster: str) -> None:
    """Three variants on a 2-CPU cluster: int8 and bf16 (smallest planned) run together in the
    first wave; both meet the floor, so fp32 is pruned and never reaches Ray. Fidelity and the sibling
    rule off: with either, bf16 (the baseline) would run alone first."""
    out = tiny["base"] / "out-ray-adaptive"
    done, wall = run_sweep(tiny, out, "hydra/launcher=ray_cpus", f"hydra.launcher.ray.init.address={cluster}",
                           "evalset.tasks=[sentiment]", "policy.floors.sentiment=0.0", "device=cpu",
                           "measure.fidelity=false", "search.sibling_margin=null",
                           # each scripted request waits 2 s, so that a variant outlasts a Ray worker's start
                           # (the second task's process started 5 s after the first's on a busy machine)
                           "engine.ttft_ms=2000", precision="fp32,bf16,int8", search="adaptive")
    console = done.stdout + done.stderr
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-6000:]
    assert ("adaptive search over 3 variants, 2 at a time (Ray cluster: 2 CPUs / 1 CPU per variant), "
            "in this order: tiny/int8, tiny/bf16, tiny/fp32") in console
    [state] = [json.loads(p.read_text()) for p in out.glob("sweeps/*/sweep.json")]
    search = state["search"]
    assert search["workers"] == 2 and search["width_source"] == "Ray cluster: 2 CPUs / 1 CPU per variant"
    assert [(w["kind"], w["names"]) for w in search["waves"]] == [("search", ["tiny/int8", "tiny/bf16"])]
    statuses = {v["name"]: v["status"] for v in search["verdicts"]}
    assert statuses == {"tiny/int8": "eligible", "tiny/bf16": "eligible", "tiny/fp32": "pruned"}

    # fp32 never ran: never handed to Ray, no log in its folder (only the not-needed record), no MLflow run
    launched = re.findall(r"#\d+ : (.*)", console)  # the Ray launcher's line per job it hands Ray
    assert console.count("Ray Launcher is launching 2 jobs") == 1 and "launching 1 jobs" not in console
    assert len(launched) == 2 and not any("precision=fp32" in line for line in launched), launched
    sweep_dir = next(out.glob("sweeps/*"))
    assert sorted(p.name for p in (sweep_dir / "tiny" / "fp32").iterdir()) == ["record.json"]
    assert json.loads((sweep_dir / "tiny" / "fp32" / "record.json").read_text())["status"] == "not_needed"
    _, children = mlflow_runs(out)
    assert sorted(c.info.run_name for c in children) == ["tiny/bf16", "tiny/int8"]
    a, b = sorted(children, key=lambda r: r.info.start_time)
    assert b.info.start_time < a.info.end_time, "the first wave's two variants ran one after the other"

    heading = "1 wave of up to 2 variants at a time (Ray cluster: 2 CPUs / 1 CPU per variant):"
    assert heading in console and "wave 1 (search, " in console
    report = (sweep_dir / "report" / "report.md").read_text()
    assert heading in report and "- wave 1 (search, " in report and "tiny/int8, tiny/bf16" in report
    print(f"\nadaptive search, 3 variants on a 2-CPU Ray cluster: {wall:.1f} s")


@pytest.mark.vllm
def test_vllm_servers_start_in_the_ray_tasks_on_the_cpus_ray_gave_them(tmp_path: Path, cluster: str) -> None:
    """engine=vllm under the Ray launcher: two settings of one variant run at once, each in its own Ray
    task (1 CPU each on a 2-CPU cluster), each starting its vLLM server from that task's worker with
    the one CPU it was given, unbound (binding both to "the first core" would stack them), and each
    server stops with its variant."""
    from tests.integration.test_vllm_engine import gone, server_pids
    from tests.tiny import build_vllm_llama

    write_model_config(tmp_path / "conf", "tinyv", build_vllm_llama(tmp_path / "tinyv-model"))
    setup = {"conf": tmp_path / "conf", "cache": tmp_path / "cache"}
    out = tmp_path / "out"
    done, _ = run_sweep(setup, out, "hydra/launcher=ray_cpus", f"hydra.launcher.ray.init.address={cluster}",
                        "engine.vllm.enforce_eager=true", "engine.vllm.kv_cache_gib=1",
                        "engine.vllm.max_num_seqs=2,4", "measure.fidelity=false", "evalset.tasks=[sentiment]",
                        precision="bf16", model="tinyv", engine="vllm")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-6000:]
    assert "Ray Launcher is launching 2 jobs" in done.stdout + done.stderr
    jobs = sorted(out.glob("sweeps/*/tinyv/bf16/max_num_seqs=*"))
    assert len(jobs) == 2
    spans = []
    for job in jobs:
        record = json.loads((job / "record.json").read_text())
        assert record["status"] == "completed", record.get("reason")
        assert record["perf"]["latency"]["e2e_ms"]["n"] == 3  # measured through its own server
        assert record["serving"]["cores"] == ["nobind"]  # 1 CPU of the 2: a count, so the OS places it
        log = (job / "server.log").read_text()
        assert "VLLM_CPU_OMP_THREADS_BIND='nobind'" in log
        # started by this variant's worker, which ran in its Ray task (Ray's OMP_NUM_THREADS=1, our threads=1)
        assert all(gone(pid) for pid in server_pids(job)) and server_pids(job)
        spans.append((record["started_at"], record["finished_at"]))
    (a0, a1), (b0, b1) = sorted(spans)
    assert b0 < a1, "the two Ray tasks ran one after the other"
