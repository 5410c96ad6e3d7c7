"""Running the product the way a user does (`python -m selector ...`) and reading its MLflow store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# A short, cheap slice of the default eval set: enough to exercise every stage.
QUICK = ("measure=quick", "evalset.limit=2", "evalset.tasks=[sentiment,arithmetic]", "search=grid")


def selector_cmd(setup: dict[str, Path], *overrides: str) -> list[str]:
    return [
        sys.executable, "-m", "selector",
        f"hydra.searchpath=[file://{setup['conf']}]",
        f"output_dir={setup['out']}", f"cache_dir={setup['cache']}",
        *overrides,
    ]


def run_selector(setup: dict[str, Path], *overrides: str, env: dict[str, str] | None = None,
                 timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(selector_cmd(setup, *overrides), capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env={**os.environ, **(env or {})})


def start_selector(setup: dict[str, Path], *overrides: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    # SIGINT as a shell gives it: a pytest-xdist worker ignores SIGINT, and a child would inherit that
    # (Python then installs no KeyboardInterrupt handler, and Ctrl-C tests hang).
    return subprocess.Popen(selector_cmd(setup, *overrides), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, env={**os.environ, **(env or {})}, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def mlflow_runs(out: Path, experiment: str = "selector") -> tuple[list, list]:
    """(parent runs, child runs) of an experiment in the store under `out`."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return [], []
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("selector.role") == "sweep"]
    children = [r for r in runs if r.data.tags.get("selector.role") == "variant"]
    return parents, children
