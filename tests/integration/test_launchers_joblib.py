"""hydra/launcher=joblib_gpus: variants in parallel on one machine, one GPU each.

No GPU here: the pool is named through SELECTOR_GPUS, and what is checked is that each job claimed a
different GPU id, exported it as CUDA_VISIBLE_DEVICES for its worker, and that the jobs overlapped.
The variants run on engine=scripted-tiny (tests/scripted.py): the launcher is under test, not a model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from selector.sweep.gpu_pool import GpuPool, gpu_count, visible_gpus

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("hydra_plugins.hydra_joblib_launcher")


@pytest.mark.fast
def test_pool_comes_from_selector_gpus_then_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.setenv("SELECTOR_GPUS", "0, 1,5")
    assert visible_gpus() == ["0", "1", "5"] and gpu_count() == 3
    monkeypatch.delenv("SELECTOR_GPUS")
    assert visible_gpus() == ["2", "3"]


@pytest.mark.fast
def test_a_busy_gpu_is_skipped_and_a_full_pool_waits(tmp_path: Path) -> None:
    first, second, third = (GpuPool(tmp_path, ["0", "1"]) for _ in range(3))
    assert first.acquire(job_num=0) == "0"
    assert second.acquire(job_num=2) == "1"  # 2 % 2 -> GPU 0, busy: takes the free one
    with pytest.raises(TimeoutError):
        third.acquire(job_num=1, timeout_s=2.5)
    first.release()
    assert third.acquire(job_num=1, timeout_s=5) == "0"


@pytest.mark.fast
def test_claims_hold_across_processes(tmp_path: Path) -> None:
    """Joblib runs jobs in separate processes: a GPU held by one is not handed to another."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from selector.sweep.gpu_pool import GpuPool;"
         f"p = GpuPool(Path({str(tmp_path)!r}), ['0', '1']); print(p.acquire(0), flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "0"
        assert GpuPool(tmp_path, ["0", "1"]).acquire(job_num=0, timeout_s=5) == "1"
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.fast
def test_n_jobs_is_the_pool_size(monkeypatch: pytest.MonkeyPatch) -> None:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from selector.config import CONF_DIR

    monkeypatch.setenv("SELECTOR_GPUS", "0,1,2")
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["hydra/launcher=joblib_gpus"], return_hydra_config=True)
    assert cfg.hydra.callbacks.gpu_pool._target_ == "selector.sweep.gpu_pool.GpuPoolCallback"
    assert OmegaConf.select(cfg, "hydra.launcher.n_jobs") == 3  # ${selector_gpu_count:}


def test_two_variants_run_at_once_each_on_its_own_gpu(tiny_setup: dict[str, Path], scripted: str) -> None:
    out = tiny_setup["out"]
    cmd = [sys.executable, "-m", "selector", f"hydra.searchpath=[file://{tiny_setup['conf']}]", f"output_dir={out}",
           f"cache_dir={tiny_setup['cache']}", "model=tiny", scripted, "precision=fp32,bf16", "measure=quick",
           "search=grid",
           "evalset.limit=2", "threads=1", "device=cpu", "hydra/launcher=joblib_gpus"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env={**os.environ, "SELECTOR_GPUS": "4,6"})
    assert done.returncode == 0, done.stderr[-6000:]
    logs = {p.parent.name: p.read_text() for p in out.glob("sweeps/*/tiny/*/selector.log")}
    gpus = {name: next(line.rsplit(" ", 1)[1] for line in text.splitlines() if "runs on GPU" in line)
            for name, text in logs.items()}
    assert sorted(gpus) == ["bf16", "fp32"] and sorted(gpus.values()) == ["4", "6"]

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("selector").experiment_id])
    children = sorted((r for r in runs if r.data.tags.get("selector.role") == "variant"), key=lambda r: r.info.start_time)
    parent = next(r for r in runs if r.data.tags.get("selector.role") == "sweep")
    assert len(children) == 2 and all(c.data.tags["mlflow.parentRunId"] == parent.info.run_id for c in children)
    assert all(c.data.tags["selector.status"] == "completed" for c in children)
    assert children[1].info.start_time < children[0].info.end_time, "the joblib jobs did not overlap"


def test_adaptive_search_runs_in_waves_of_the_pool_size(tiny_setup: dict[str, Path], scripted: str) -> None:
    """Two GPUs in the pool: waves of two, smallest planned first; once a wave has an eligible
    variant, the larger ones left are not needed. Fidelity and the sibling rule off: with either, bf16
    (the baseline) would run alone first (tests/unit/test_search_driver.py)."""
    out = tiny_setup["out"]
    cmd = [sys.executable, "-m", "selector", f"hydra.searchpath=[file://{tiny_setup['conf']}]", f"output_dir={out}",
           f"cache_dir={tiny_setup['cache']}", "model=tiny", scripted, "precision=fp32,bf16,int8", "measure=quick",
           "evalset.limit=2", "evalset.tasks=[sentiment]", "policy.floors.sentiment=0.0", "threads=1",
           "device=cpu", "hydra/launcher=joblib_gpus", "measure.fidelity=false", "search.sibling_margin=null"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env={**os.environ, "SELECTOR_GPUS": "4,6"})
    assert done.returncode == 0, done.stderr[-6000:]
    [state] = [json.loads(p.read_text()) for p in out.glob("sweeps/*/sweep.json")]
    search = state["search"]
    assert search["workers"] == 2 and search["order"] == ["tiny/int8", "tiny/bf16", "tiny/fp32"]
    assert search["width_source"] == "joblib: n_jobs=2"
    assert [(w["kind"], w["names"]) for w in search["waves"]] == [("search", ["tiny/int8", "tiny/bf16"])]
    statuses = {v["name"]: v["status"] for v in search["verdicts"]}
    # int8 and bf16 ran together in the first wave; both met the floor, so fp32 was not needed
    assert statuses == {"tiny/int8": "eligible", "tiny/bf16": "eligible", "tiny/fp32": "pruned"}
