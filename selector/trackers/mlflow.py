"""MLflow tracker: a parent run per sweep, a child run per variant, through MlflowClient.

Everything goes through explicit run ids (never the global "active run"), so it works inside a run
the user already opened (the sweep nests under it), from several processes, and with Hydra launchers
that run variants elsewhere. Resume finds earlier runs by tags: `selector.sweep_key` on the parent,
`selector.variant_key` on each child.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

from selector.config import TrackerConfig
from selector.trackers.base import EvalsetInfo
from selector.trackers.naming import load_metrics, record_metrics, record_params, record_tags
from selector.records import RunRecord

log = logging.getLogger("selector.mlflow")
T = TypeVar("T")
RECORD_ARTIFACT = "record.json"
SWEEP_CONFIG_ARTIFACT = "sweep_config.json"
RETRIES_ENV = "MLFLOW_HTTP_REQUEST_MAX_RETRIES"
UI_ADDRESS = "http://127.0.0.1:5000"  # where `mlflow ui` serves by default
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}  # MLflow 3 opens it on its runs table  # read by MLflow's HTTP client on every request


def local_uri(output_dir: Path) -> str:
    return f"sqlite:///{Path(output_dir).resolve() / 'mlflow.db'}"


def is_remote(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def server_unreachable(e: Exception) -> bool:
    """A connection failure, timeout or 5xx that outlasted MLflow's retries; not a refusal (401/403/404)."""
    from mlflow.exceptions import MlflowException, RestException

    if not isinstance(e, MlflowException) or isinstance(e, RestException):
        return False
    text = str(e)
    return "failed with exception" in text or "timeout" in text.lower()


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:300]


def _store_lock(uri: str) -> Any:
    """Two sweeps opening a new SQLite store at once would both run MLflow's schema migration
    and one would fail; a file lock beside the database makes the first one win cleanly."""
    from contextlib import nullcontext

    from filelock import FileLock

    if not uri.startswith("sqlite:///"):
        return nullcontext()
    return FileLock(uri.removeprefix("sqlite:///") + ".lock", timeout=300)


class MlflowTracker:
    def __init__(self, cfg: TrackerConfig, experiment: str, output_dir: Path) -> None:
        output_dir = Path(output_dir).resolve()
        self.experiment_name = cfg.experiment or experiment
        self.fallback_from: str | None = None  # the server we could not reach, when recording locally
        uri = cfg.tracking_uri or local_uri(output_dir)
        if not is_remote(uri):
            self._connect(uri, cfg.artifact_location, output_dir, max(1, cfg.retries))
            return
        # A tracking server: MLflow's HTTP client retries transient failures (connection errors,
        # 408/429/5xx) with backoff itself, so our own loop makes a single attempt per call.
        os.environ[RETRIES_ENV] = str(max(0, cfg.retries))
        try:
            self._connect(uri, cfg.artifact_location, output_dir, 1)
        except Exception as e:
            if not server_unreachable(e):
                raise
            self.fallback_from = uri
            fallback = local_uri(output_dir)
            log.warning(
                "MLflow server %s is unreachable (%s). This sweep is recorded locally in %s instead. "
                "When the server is back, copy it there with:\n  python -m selector sync --from %s --to %s",
                uri, _first_line(e), fallback, fallback, uri,
            )
            self._connect(fallback, None, output_dir, max(1, cfg.retries))

    def _connect(self, uri: str, artifact_location: str | None, output_dir: Path, attempts: int) -> None:
        from mlflow import MlflowClient

        self.uri, self.retries = uri, attempts
        local = uri.startswith(("sqlite:", "file:")) or "://" not in uri
        if local:
            output_dir.mkdir(parents=True, exist_ok=True)
        # Elsewhere the store decides: a server with --serve-artifacts proxies its own artifact store.
        artifacts = artifact_location or ((output_dir / "mlartifacts").as_uri() if local else None)
        with _store_lock(uri):
            self.client = MlflowClient(tracking_uri=uri)
            self.experiment_id = self._retry(lambda: self._experiment(self.experiment_name, artifacts))

    # ---- plumbing ------------------------------------------------------------------------
    def _retry(self, fn: Callable[[], T]) -> T:
        """Transient errors (a busy SQLite file, a flaky server) are retried with backoff."""
        for attempt in range(self.retries):
            try:
                return fn()
            except Exception as e:  # MlflowException, requests errors, sqlite OperationalError
                if attempt == self.retries - 1 or "RESOURCE_ALREADY_EXISTS" in str(e):
                    raise
                log.warning("MLflow call failed (%s); retrying", e)
                time.sleep(0.5 * 2**attempt)
        raise AssertionError("unreachable")

    def _experiment(self, name: str, artifact_location: str | None) -> str:
        exp = self.client.get_experiment_by_name(name)
        if exp is not None:
            if exp.tags.get("mlflow.experimentKind") is None:  # made by an older selector, or by hand
                for key, value in EXPERIMENT_KIND.items():
                    self.client.set_experiment_tag(exp.experiment_id, key, value)
            return exp.experiment_id
        try:
            # MLflow 3 opens untagged experiments on its GenAI views; ours are model comparisons.
            return self.client.create_experiment(name, artifact_location=artifact_location, tags=EXPERIMENT_KIND)
        except Exception:  # another process created it between our two calls
            exp = self.client.get_experiment_by_name(name)
            if exp is None:
                raise
            return exp.experiment_id

    def _search(self, filter_string: str, max_results: int = 1000) -> list[Any]:
        return self._retry(
            lambda: self.client.search_runs(
                [self.experiment_id], filter_string=filter_string, max_results=max_results,
                order_by=["attributes.start_time DESC"],
            )
        )

    def ui_hint(self, parent_id: str | None, child_ids: list[str]) -> list[str]:
        """How to look at a sweep: the command that serves a local store, and direct links to the
        sweep's runs (in MLflow 3's model-training view, not its GenAI home) and to its variants
        side by side."""
        import json
        from urllib.parse import quote

        local = not is_remote(self.uri)
        base = UI_ADDRESS if local else self.uri.rstrip("/")
        lines = [f"mlflow ui --backend-store-uri {self.uri}"] if local else []
        lines.append(f"sweep runs: {base}/#/experiments/{self.experiment_id}/runs?workflowType=machine_learning")
        if parent_id:
            lines.append(f"sweep run:  {base}/#/experiments/{self.experiment_id}/runs/{parent_id}"
                         "?workflowType=machine_learning")
        if len(child_ids) > 1:
            runs = quote(json.dumps(child_ids, separators=(",", ":")))
            experiments = quote(json.dumps([self.experiment_id]))
            lines.append(f"variants side by side: {base}/#/compare-runs?runs={runs}&experiments={experiments}")
        return lines

    # ---- sweep ---------------------------------------------------------------------------
    def start_sweep(self, sweep_key: str, name: str, params: dict[str, Any], tags: dict[str, str],
                    config: dict[str, Any] | None = None) -> str:
        import mlflow

        previous = self._search(f"tags.`selector.sweep_key` = '{sweep_key}' and tags.`selector.role` = 'sweep'", 1)
        if previous:
            run_id = previous[0].info.run_id
            self._retry(lambda: self.client.update_run(run_id, status="RUNNING"))
            self.client.set_tag(run_id, "selector.resumed", "true")
            log.info("resuming sweep run %s", run_id)
            return run_id
        all_tags = {**tags, "selector.sweep_key": sweep_key, "selector.role": "sweep"}
        outer = mlflow.active_run()  # a run the caller opened: the sweep nests under it
        if outer is not None:
            all_tags["mlflow.parentRunId"] = outer.info.run_id
        run = self._retry(lambda: self.client.create_run(self.experiment_id, run_name=name, tags=all_tags))
        self._log_params(run.info.run_id, params)
        if config is not None:
            self._retry(lambda: self.client.log_dict(run.info.run_id, config, SWEEP_CONFIG_ARTIFACT))
        return run.info.run_id

    def load_sweep_config(self, parent_id: str) -> dict[str, Any] | None:
        import json

        with tempfile.TemporaryDirectory() as tmp:
            try:
                path = self.client.download_artifacts(parent_id, SWEEP_CONFIG_ARTIFACT, tmp)
            except Exception as e:  # a sweep recorded before the config was kept
                log.debug("run %s has no sweep config: %s", parent_id, e)
                return None
            return json.loads(Path(path).read_text())

    def finish_sweep(self, parent_id: str | None, metrics: dict[str, float], tags: dict[str, str],
                     artifacts: list[Path], status: str = "FINISHED") -> None:
        if parent_id is None:
            return
        self._log_batch(parent_id, metrics=metrics, tags=tags)
        for path in artifacts:
            self._retry(lambda p=path: self.client.log_artifact(parent_id, str(p), artifact_path="report"))
        self._retry(lambda: self.client.set_terminated(parent_id, status=status))

    # ---- variants ------------------------------------------------------------------------
    def start_variant(self, parent_id: str | None, record_name: str, key: str, tags: dict[str, str]) -> str:
        all_tags = {**tags, "selector.role": "variant", "selector.variant_key": key, "selector.status": "running"}
        if parent_id:
            all_tags["mlflow.parentRunId"] = parent_id
        run = self._retry(lambda: self.client.create_run(self.experiment_id, run_name=record_name, tags=all_tags))
        return run.info.run_id

    def finish_variant(self, run_id: str | None, record: RunRecord, artifacts: list[Path], evalset: EvalsetInfo | None = None) -> None:
        if run_id is None:
            return
        record.mlflow_run_id = run_id
        self._log_params(run_id, record_params(record))
        self._log_batch(run_id, metrics=record_metrics(record), tags=record_tags(record))
        steps = load_metrics(record)
        if steps:
            from mlflow.entities import Metric

            now = int(time.time() * 1000)
            batch = [Metric(k, float(v), now, s) for k, v, s in steps]
            self._retry(lambda: self.client.log_batch(run_id, metrics=batch))
        if evalset is not None:
            self._log_evalset(run_id, evalset)
        with tempfile.TemporaryDirectory() as tmp:
            path = record.save(Path(tmp) / RECORD_ARTIFACT)
            self._retry(lambda: self.client.log_artifact(run_id, str(path)))
        for path in artifacts:
            if Path(path).exists():
                self._retry(lambda p=path: self.client.log_artifact(run_id, str(p)))
        status = "FAILED" if record.status == "failed" else "FINISHED"
        self._retry(lambda: self.client.set_terminated(run_id, status=status))

    def log_metrics(self, run_id: str | None, metrics: dict[str, float]) -> None:
        if run_id and metrics:
            self._log_batch(run_id, metrics=metrics, tags={})

    def _log_evalset(self, run_id: str, evalset: EvalsetInfo) -> None:
        """Record the eval set as an MLflow dataset input (name, digest, source, schema)."""
        from mlflow.entities import DatasetInput, InputTag

        dataset = _mlflow_dataset(evalset)
        tag = InputTag(key="mlflow.data.context", value="eval")
        self._retry(lambda: self.client.log_inputs(run_id, [DatasetInput(dataset._to_mlflow_entity(), [tag])]))

    def _log_params(self, run_id: str, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        existing = self.client.get_run(run_id).data.params
        new = [Param(k, str(v)[:6000]) for k, v in params.items() if k not in existing]
        self._retry(lambda: self.client.log_batch(run_id, params=new))  # it splits into MLflow's batch limits

    def _log_batch(self, run_id: str, metrics: dict[str, float], tags: dict[str, str]) -> None:
        from mlflow.entities import Metric, RunTag

        now = int(time.time() * 1000)
        ms = [Metric(k, float(v), now, 0) for k, v in metrics.items()]
        ts = [RunTag(k, str(v)) for k, v in tags.items()]
        self._retry(lambda: self.client.log_batch(run_id, metrics=ms, tags=ts))  # it splits into MLflow's limits

    # ---- resume --------------------------------------------------------------------------
    def find_completed(self, parent_id: str | None, key: str) -> RunRecord | None:
        runs = self._search(f"tags.`selector.variant_key` = '{key}' and tags.`selector.status` = 'completed'", 20)
        runs.sort(key=lambda r: r.data.tags.get("mlflow.parentRunId") != parent_id)  # this sweep's first
        for run in runs:
            record = self._download_record(run.info.run_id)
            if record is not None:
                record.mlflow_run_id = run.info.run_id
                return record
        return None

    def parent_of(self, run_id: str) -> str | None:
        return self.client.get_run(run_id).data.tags.get("mlflow.parentRunId")

    def mark_killed(self, run_ids: list[str | None]) -> None:
        for run_id in filter(None, run_ids):
            self.client.set_tag(run_id, "selector.status", "interrupted")
            self.client.set_terminated(run_id, status="KILLED")

    def mark_interrupted(self, parent_id: str | None) -> int:
        if parent_id is None:
            return 0
        stale = self._search(f"tags.`mlflow.parentRunId` = '{parent_id}' and attributes.status = 'RUNNING'")
        for run in stale:
            self.client.set_tag(run.info.run_id, "selector.status", "interrupted")
            self._retry(lambda r=run: self.client.set_terminated(r.info.run_id, status="KILLED"))
        return len(stale)

    def load_records(self, parent_id: str) -> list[RunRecord]:
        records = []
        for run in self._search(f"tags.`mlflow.parentRunId` = '{parent_id}'"):
            if run.data.tags.get("selector.status") in ("running", "interrupted"):
                continue
            record = self._download_record(run.info.run_id)
            if record is not None:
                record.mlflow_run_id = run.info.run_id
                records.append(record)
        return records

    def _download_record(self, run_id: str) -> RunRecord | None:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                path = self.client.download_artifacts(run_id, RECORD_ARTIFACT, tmp)
            except Exception as e:  # no record artifact (a run from before it was written)
                log.debug("run %s has no record: %s", run_id, e)
                return None
            return RunRecord.load(path)


def _mlflow_dataset(evalset: EvalsetInfo) -> Any:
    """The eval set's items as an MLflow dataset (one row per item, fields as written)."""
    import json

    import mlflow.data
    import pandas as pd
    from mlflow.data.dataset_source_registry import get_registered_sources

    rows = [{"task": t.name, "id": item.id, "fields": json.dumps(item.fields, ensure_ascii=False)}
            for t in evalset.tasks for item in t.items]
    # MLflow registers its local-file source class twice and warns when it resolves a string.
    local = next(s for s in get_registered_sources() if s.__name__ == "LocalArtifactDatasetSource")
    source = local(str(Path(evalset.path).resolve()))
    return mlflow.data.from_pandas(pd.DataFrame(rows), source=source, name=evalset.name, digest=evalset.digest[:16])
