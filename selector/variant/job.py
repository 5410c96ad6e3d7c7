"""One planned variant's job, wherever the launcher runs it (the sweep's Hydra task function,
selector.sweep.task, hands it over with what the sweep's plan says of it).

Reuse a completed record of the same variant key if there is one; otherwise open the variant's
child run, have its worker measure it (supervise.py), and log and keep the record.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from selector.config import SelectorConfig
from selector.variant.evaluation import load_tasks
from selector.variant.jobfiles import bare_record
from selector.variant.supervise import record_store, run_variant
from selector.trackers import EvalsetInfo, Tracker, make_tracker
from selector.records import RunRecord, setting_label

log = logging.getLogger("selector.variant.job")


@dataclass(frozen=True)
class PlannedJob:
    """What the sweep's plan says of one variant: its keys, its name and setting, whether it can run
    here (decided once, by the preflight: selector.variant.availability) and its place in the sweep."""

    key: str
    evaluation_key: str
    name: str
    setting: dict[str, Any] = field(default_factory=dict)
    available: bool = True
    reason: str = ""
    parent: str | None = None  # the sweep's parent run
    sweep_key: str | None = None
    is_reference: bool = False
    baseline: dict[str, Any] | None = None  # the baseline precision's config (the fidelity reference)
    reference_key: str | None = None  # the reference variant's evaluation key (adaptive non-inferiority)


def run_job(cfg: SelectorConfig, planned: PlannedJob, job_dir: Path) -> dict[str, Any]:
    """One variant, as the sweep's preflight planned it: its config was composed and validated
    there, its keys computed and its availability decided there."""
    tasks, ehash = load_tasks(cfg)  # the tracker records the eval set as the variant's dataset
    key, name, setting, parent = planned.key, planned.name, planned.setting, planned.parent
    tracker = make_tracker(cfg.tracker, cfg.experiment, cfg.output_dir)
    extra = {"evalset_hash": ehash, "sweep_key": planned.sweep_key}

    if not cfg.force:
        done = _completed_record(cfg, tracker, parent, key)
        if done is not None:
            done.variant.setting = setting  # measured under another sweep's label, if any
            return _reuse(done, tracker, parent, name, key, job_dir, tasks)

    # The worker asks again on the device it gets (a launcher may run it on another machine).
    tags = {"selector.model": cfg.model.name, "selector.precision": cfg.precision.name,
            **({"selector.setting": setting_label(setting)} if setting else {})}
    child = tracker.start_variant(parent, name, key, tags)
    try:
        if planned.available:
            record = run_variant(cfg, key, planned.evaluation_key, job_dir, extra, is_reference=planned.is_reference,
                                 baseline=planned.baseline, reference_key=planned.reference_key)
        else:
            record = bare_record(cfg, key, "skipped", planned.reason, preparation="none")
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


def tasks_dataset(cfg: SelectorConfig, tasks: Any, ehash: str) -> EvalsetInfo:
    """The eval set, for the tracker to record as the dataset the variant was scored on."""
    from selector.tasks.loader import locate_evalset

    return EvalsetInfo(cfg.evalset.name, str(locate_evalset(cfg.evalset.path)), tasks, ehash)
