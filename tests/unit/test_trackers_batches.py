"""More than one request's worth of params, tags and metrics (MLflow takes 100 params or tags and
1000 metrics per request): the tracker and `sync` pass them whole to MlflowClient.log_batch, which
splits them itself, and nothing is lost on the way."""

from __future__ import annotations

from pathlib import Path

from mlflow import MlflowClient
from mlflow.entities import Metric, Param

from selector.config import TrackerConfig
from selector.trackers.mlflow import MlflowTracker, local_uri
from selector.trackers.sync import sync

PARAMS, TAGS, METRICS = 250, 230, 2500


def test_a_sweep_run_keeps_every_param_tag_and_metric(tmp_path: Path) -> None:
    tracker = MlflowTracker(TrackerConfig(), "batches", tmp_path)
    run_id = tracker.start_sweep("key", "sweep", {f"p{i:03d}": i for i in range(PARAMS)}, {})
    tracker.finish_sweep(run_id, {f"m{i:04d}": i / 2 for i in range(METRICS)},
                         {f"t{i:03d}": str(i) for i in range(TAGS)}, artifacts=[])
    data = MlflowClient(tracking_uri=local_uri(tmp_path)).get_run(run_id).data
    assert len(data.params) == PARAMS and data.params["p249"] == "249"
    assert len(data.metrics) == METRICS and data.metrics["m2499"] == 1249.5
    assert sum(k.startswith("t") for k in data.tags) == TAGS and data.tags["t229"] == "229"


def test_sync_copies_a_long_metric_history_and_many_params(tmp_path: Path) -> None:
    source, dest = f"sqlite:///{tmp_path / 'src.db'}", f"sqlite:///{tmp_path / 'dst.db'}"
    src = MlflowClient(tracking_uri=source)
    run = src.create_run(src.create_experiment("batches", artifact_location=(tmp_path / "art").as_uri()))
    history = [Metric("loss", 1.0 / (step + 1), 1_700_000_000_000 + step, step) for step in range(METRICS)]
    src.log_batch(run.info.run_id, metrics=history, params=[Param(f"p{i:03d}", str(i)) for i in range(PARAMS)])
    src.set_terminated(run.info.run_id)

    copied = sync(source, dest).copied
    dst = MlflowClient(tracking_uri=dest)
    new_id = copied[run.info.run_id]
    assert len(dst.get_run(new_id).data.params) == PARAMS
    steps = dst.get_metric_history(new_id, "loss")
    assert sorted(m.step for m in steps) == list(range(METRICS))
    assert {m.step: m.value for m in steps}[METRICS - 1] == 1.0 / METRICS
