"""The Hydra task function: what runs for each variant of a sweep, wherever the launcher runs it.

Reuse a completed record of the same variant key if there is one; otherwise open the variant's
child run, have its worker measure it (supervise.py), and log and keep the record.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from selector.compose import config_from_dict
from selector.config import SelectorConfig
from selector.errors import SweepError
from selector.logs import setup_logging
from selector.sweep import preflight
from selector.sweep.availability import availability
from selector.sweep.jobfiles import bare_record
from selector.sweep.state import FULL, STATE_FILE, read_state
from selector.sweep.supervise import run_variant
from selector.trackers import EvalsetInfo, Tracker, make_tracker
from selector.records import RunRecord, setting_label

log = logging.getLogger("selector.sweep.job")


def run_job(raw: DictConfig) -> dict[str, Any]:
    """One variant, as the sweep's preflight planned it (its entry in sweep.json): its config was
    composed and validated there, its keys computed there."""
    setup_logging()
    hc = HydraConfig.get()
    assert hc.mode is not None  # Hydra sets it for every job it runs
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
    tasks, ehash = preflight.load_tasks(cfg)  # the tracker records the eval set as the variant's dataset
    key, name, setting = entry.key, entry.name, entry.setting
    if cfg.search.seed is None and state.order_seed is not None:
        cfg.search.seed = state.order_seed  # the sweep's item order (selector.sweep.order_seed)
    parent = state.parent_run_id
    if state.tracking_uri and cfg.tracker.kind == "mlflow":
        # The store the parent run is in: a local fallback when the server was down at sweep start.
        cfg.tracker.tracking_uri = state.tracking_uri
    tracker = make_tracker(cfg.tracker, cfg.experiment, cfg.output_dir)
    extra = {"evalset_hash": ehash, "sweep_key": state.sweep_key}

    if not cfg.force:
        done = _completed_record(cfg, tracker, parent, key)
        if done is not None:
            done.variant.setting = setting  # measured under another sweep's label, if any
            return _reuse(done, tracker, parent, name, key, job_dir, tasks)

    # Again: a launcher may run the job on another machine than the preflight's.
    ok, why = availability(cfg, load_library=False)
    tags = {"selector.model": cfg.model.name, "selector.precision": cfg.precision.name,
            **({"selector.setting": setting_label(setting)} if setting else {})}
    child = tracker.start_variant(parent, name, key, tags)
    try:
        if ok:
            record = run_variant(cfg, key, job_dir, extra, is_reference=state.reference == name,
                                 baseline=entry.baseline, reference_key=state.reference_evaluation_key)
        else:
            record = bare_record(cfg, key, "skipped", why, preparation="none")
            record.config.update(extra)
    except BaseException:  # Ctrl-C or SIGTERM: end both runs as KILLED, then stop
        tracker.mark_killed([child, parent])
        raise
    record.variant.setting = setting
    record.mlflow_run_id = child
    files = [job_dir / "samples.jsonl", job_dir / "worker.log"]
    tracker.finish_variant(child, record, files, tasks_dataset(cfg, tasks, ehash))
    _save(record, cfg, job_dir)
    log.info("%s: %s%s%s", name, record.status, f" ({record.reason})" if record.reason else "", _quantized(record))
    return {"variant": name, "status": record.status}


def _quantized(record: RunRecord) -> str:
    """The console's word on the quantization: made in this sweep, or read from the cache."""
    from selector.report.fmt import seconds

    quant = record.quant
    if quant is None or quant.quantize_s is None:
        return ""
    if record.quant_from_cache:
        return f"; quantized artifact from the cache (made in {seconds(quant.quantize_s)})"
    return f"; quantized in {seconds(quant.quantize_s)}"


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


def _completed_record(cfg: SelectorConfig, tracker: Tracker, parent: str | None, key: str) -> RunRecord | None:
    local = record_store(cfg) / f"{key}.json"
    if local.exists():
        record = RunRecord.load(local)
        if record.status == "completed":
            return record
    return tracker.find_completed(parent, key)


def _reuse(record: RunRecord, tracker: Tracker, parent: str | None, name: str, key: str, job_dir: Path, tasks: Any) -> dict[str, Any]:
    """A completed record for this exact variant exists: keep it, measure nothing again."""
    in_this_sweep = record.mlflow_run_id is not None and tracker.parent_of(record.mlflow_run_id) == parent
    if not in_this_sweep and parent is not None:
        # Another sweep measured it: give this sweep its own child run holding the same record.
        child = tracker.start_variant(parent, name, key, {"selector.reused_from": record.mlflow_run_id or "local"})
        record.mlflow_run_id = child
        tracker.finish_variant(child, record, [], None)
    record.save(job_dir / "record.json")
    log.info("%s: already measured (variant key %s), reusing its record", name, key)
    return {"variant": name, "status": record.status, "reused": True}


def _save(record: RunRecord, cfg: SelectorConfig, job_dir: Path) -> None:
    record.save(job_dir / "record.json")
    if record.status == "completed":
        record.save(record_store(cfg) / f"{record.key}.json")


def record_store(cfg: SelectorConfig) -> Path:
    """Completed records by variant key: resume works without a tracker too."""
    return Path(cfg.output_dir) / "records"


def tasks_dataset(cfg: SelectorConfig, tasks: Any, ehash: str) -> EvalsetInfo:
    """The eval set, for the tracker to record as the dataset the variant was scored on."""
    from selector.tasks.loader import locate_evalset

    return EvalsetInfo(cfg.evalset.name, str(locate_evalset(cfg.evalset.path)), tasks, ehash)
