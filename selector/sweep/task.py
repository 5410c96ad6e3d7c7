"""The Hydra task function: what the launcher runs for each variant of a sweep, wherever it runs it.

It finds the variant's entry in the sweep's plan (sweep.json) and hands it to the variant's job
(selector.variant.job), which measures it or reuses its record.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from selector.compose import config_from_dict
from selector.errors import SweepError
from selector.logs import setup_logging
from selector.sweep.state import FULL, STATE_FILE, read_state
from selector.variant.job import PlannedJob, run_job as run_planned

log = logging.getLogger("selector.sweep.task")


def run_job(raw: DictConfig) -> dict[str, Any]:
    """One variant, as the sweep's preflight planned it (its entry in sweep.json)."""
    setup_logging()
    hc = HydraConfig.get()
    base = hc.sweep.dir if hc.mode.name == "MULTIRUN" else hc.run.dir
    job_dir = _enter_launch_dir(hc.runtime.cwd, Path(hc.runtime.output_dir), Path(str(base)).is_absolute())
    # The sweep folder Hydra names (a relative one is the launch folder's, where we now are), not an
    # environment variable: a Ray worker's environment is its cluster's, which another sweep may have set.
    state = read_state(Path(str(base)))
    overrides = list(hc.overrides.task)
    entry = state.entry_for(overrides)
    if entry is None or entry.config is None:
        raise SweepError(f"job {' '.join(overrides) or '(no overrides)'}: not in the sweep's plan ({STATE_FILE} "
                         f"under {base}); was the sweep folder changed while it ran?")
    cfg = config_from_dict(entry.config)
    if FULL in overrides:
        cfg.search.stop_early = False
    if cfg.search.seed is None and state.order_seed is not None:
        cfg.search.seed = state.order_seed  # the sweep's item order (selector.sweep.order_seed)
    if state.tracking_uri and cfg.tracker.kind == "mlflow":
        # The store the parent run is in: a local fallback when the server was down at sweep start.
        cfg.tracker.tracking_uri = state.tracking_uri
    planned = PlannedJob(key=entry.key, evaluation_key=entry.evaluation_key, name=entry.name, setting=entry.setting,
                         available=entry.available, reason=entry.reason, parent=state.parent_run_id,
                         sweep_key=state.sweep_key, is_reference=state.reference == entry.name,
                         baseline=entry.baseline, reference_key=state.reference_evaluation_key)
    return run_planned(cfg, planned, job_dir)


def _enter_launch_dir(launch_cwd: str, job_dir: Path, base_is_absolute: bool) -> Path:
    """Run where the sweep was launched, so relative paths (evalsets/, outputs/) mean the same in a
    Ray or SLURM worker, which starts in a directory of its own, as on the command line. Returns
    the job folder, re-based there when Hydra placed it under the worker's own directory."""
    import os

    here = Path.cwd()
    if not launch_cwd or not Path(launch_cwd).is_dir() or here == Path(launch_cwd):
        return job_dir
    log.info("changing directory to %s (where the sweep was launched)", launch_cwd)
    os.chdir(launch_cwd)
    if not base_is_absolute and job_dir.is_relative_to(here):  # Hydra made it absolute against the worker's cwd
        job_dir = Path(launch_cwd) / job_dir.relative_to(here)
        job_dir.mkdir(parents=True, exist_ok=True)
    return job_dir
