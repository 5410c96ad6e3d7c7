"""A comparison of two sweeps (`selector compare`, or a sweep's compare_to) in MLflow: on the later
sweep's parent run, as artifacts under compare/ and tags naming the sweep it was compared with."""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger("selector.mlflow")


def attach_to_run(uri: str, run_id: str, files: list[Path], tags: dict[str, str]) -> str | None:
    """A comparison of two sweeps (selector compare) on the later sweep's parent run: its files
    under compare/, and tags naming the sweep it was compared with. None when the store or the run
    cannot be reached (the files on disk are still there)."""
    from mlflow import MlflowClient

    try:
        client = MlflowClient(tracking_uri=uri)
        for path in files:
            client.log_artifact(run_id, str(path), artifact_path="compare")
        for key, value in tags.items():
            client.set_tag(run_id, key, value[:5000])
    except Exception as e:  # a store that moved or a server that is down: the comparison itself stands
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        log.warning("could not log the comparison to MLflow run %s at %s: %s", run_id, uri, first)
        return None
    return run_id
