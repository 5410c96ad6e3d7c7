"""Copy recorded sweeps from one MLflow store to another (`python -m selector sync`).

Made for the sweep that ran while the shared tracking server was down and was recorded in a local
SQLite store instead: once the server is back, this copies every run (parents before children, with
the parent links re-pointed), its params, full metric histories, tags, dataset inputs, artifacts and
final status. Each copied run is tagged `selector.synced_from` with its source id, so running sync
again copies only what is new. Runs still RUNNING at the source are left for a later sync.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass, field
from typing import Any

from selector.errors import UserError

log = logging.getLogger("selector.trackers.sync")
SYNCED_FROM = "selector.synced_from"
PARENT = "mlflow.parentRunId"


@dataclass
class SyncResult:
    copied: dict[str, str] = field(default_factory=dict)  # source run id -> destination run id
    skipped_existing: int = 0
    skipped_running: int = 0
    experiments: list[str] = field(default_factory=list)


def sync(source_uri: str, dest_uri: str, experiments: list[str] | None = None) -> SyncResult:
    """Copy the runs of `experiments` (default: every experiment with runs) from source to dest."""
    from mlflow import MlflowClient

    if source_uri == dest_uri:
        raise UserError("sync: --from and --to are the same store")
    src, dst = MlflowClient(tracking_uri=source_uri), MlflowClient(tracking_uri=dest_uri)
    result = SyncResult()
    for exp in _experiments(src, experiments):
        runs = _all_runs(src, exp.experiment_id)
        if not runs:
            continue
        result.experiments.append(exp.name)
        dest_exp = _dest_experiment(dst, exp.name)
        already = {r.data.tags[SYNCED_FROM]: r.info.run_id for r in _all_runs(dst, dest_exp) if SYNCED_FROM in r.data.tags}
        # Parents first (a child's tag must name its parent's new id), then by start time.
        for run in sorted(runs, key=lambda r: (PARENT in r.data.tags, r.info.start_time or 0)):
            rid = run.info.run_id
            if rid in already:
                result.skipped_existing += 1
                continue
            if run.info.status == "RUNNING":
                result.skipped_running += 1
                continue
            result.copied[rid] = _copy_run(src, dst, run, dest_exp, {**already, **result.copied})
    return result


def _experiments(client: Any, names: list[str] | None) -> list[Any]:
    from mlflow.entities import ViewType

    found = client.search_experiments(view_type=ViewType.ACTIVE_ONLY)
    if not names:
        return found
    by_name = {e.name: e for e in found}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise UserError(f"sync: no experiment named {', '.join(missing)} in the source store "
                        f"(it has: {', '.join(sorted(by_name)) or 'none'})")
    return [by_name[n] for n in names]


def _all_runs(client: Any, experiment_id: str) -> list[Any]:
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def _dest_experiment(client: Any, name: str) -> str:
    exp = client.get_experiment_by_name(name)
    return exp.experiment_id if exp is not None else client.create_experiment(name)


def _copy_run(src: Any, dst: Any, run: Any, experiment_id: str, id_map: dict[str, str]) -> str:
    from mlflow.entities import Metric, Param

    tags = {k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.log-model")}
    if PARENT in tags:
        tags[PARENT] = id_map.get(tags[PARENT], tags[PARENT])
    tags[SYNCED_FROM] = run.info.run_id
    new = dst.create_run(experiment_id, start_time=run.info.start_time, tags=tags, run_name=run.info.run_name)
    rid = new.info.run_id
    history: list[Metric] = []
    for key in run.data.metrics:
        history.extend(Metric(m.key, m.value, m.timestamp, m.step) for m in src.get_metric_history(run.info.run_id, key))
    # MlflowClient.log_batch splits what it is given into the server's per-request limits itself.
    dst.log_batch(rid, metrics=history, params=[Param(k, v) for k, v in run.data.params.items()])
    inputs = getattr(run, "inputs", None)
    if inputs is not None and inputs.dataset_inputs:
        dst.log_inputs(rid, datasets=list(inputs.dataset_inputs))
    with tempfile.TemporaryDirectory() as tmp:
        if src.list_artifacts(run.info.run_id):
            local = src.download_artifacts(run.info.run_id, "", tmp)
            dst.log_artifacts(rid, local)
    dst.set_terminated(rid, status=run.info.status, end_time=run.info.end_time)
    log.info("copied run %s (%s) -> %s", run.info.run_id, run.info.run_name, rid)
    return rid
