"""The job folder: what the sweep's side and the variant's worker process share, and nothing else.

The sweep (supervise.py) writes `job.json` and starts `python -m selector.variant.worker job.json`;
the worker writes, as it goes, the stage it is in, every scored sample, the task results so far,
and at the end `record.json`. Both sides import this module; neither imports the other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from selector.config import SelectorConfig, to_dict
from selector.records import RunRecord, Status, TaskResult, Variant


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def variant_of(cfg: SelectorConfig, setting: dict[str, Any] | None = None) -> Variant:
    """The variant a config describes (parameters from the config; the worker may fill them in
    from the loaded model). setting: the serving knobs the sweep varies (the sweep's side stamps
    it on every record it keeps, selector.variant.job)."""
    return Variant(model=cfg.model.name, precision=cfg.precision.name, family=cfg.model.family,
                   params=int(cfg.model.params_b * 1e9), setting=dict(setting or {}))


def bare_record(cfg: SelectorConfig, key: str, status: Status, reason: str = "", setting: dict[str, Any] | None = None,
                **fields: object) -> RunRecord:
    """A record for a variant that produced none of its own (skipped, crashed, not needed)."""
    return RunRecord(key=key, variant=variant_of(cfg, setting), status=status, reason=reason, config=to_dict(cfg),
                     started_at=now(), finished_at=now(), **fields)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Job:
    """What a worker is asked to do."""

    config: dict[str, Any]  # the variant's resolved config, as plain data
    key: str
    evaluation_key: str  # its scored items' key (selector.variant.keys.keys_of, computed once by the caller)
    job_dir: Path
    is_reference: bool = False
    baseline: dict[str, Any] | None = None  # the baseline precision's config (for the fidelity reference)
    reference_key: str | None = None  # the reference variant's evaluation key (adaptive non-inferiority)


class JobFiles:
    """The files of one variant's job folder."""

    def __init__(self, job_dir: Path) -> None:
        self.dir = Path(job_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.job = self.dir / "job.json"
        self.stage = self.dir / "stage"
        self.samples = self.dir / "samples.jsonl"
        self.record = self.dir / "record.json"
        self.log = self.dir / "worker.log"
        self.tasks = self.dir / "tasks.partial.json"

    def write_job(self, job: Job) -> Path:
        self.job.write_text(json.dumps({"config": job.config, "key": job.key, "evaluation_key": job.evaluation_key,
                                        "job_dir": str(job.job_dir.resolve()),
                                        "is_reference": job.is_reference, "baseline": job.baseline,
                                        "reference_key": job.reference_key}))
        return self.job

    def set_stage(self, stage: str) -> None:
        self.stage.write_text(stage)

    def read_stage(self) -> str:
        return self.stage.read_text().strip() if self.stage.exists() else "preflight"

    def write_partial_tasks(self, tasks: dict[str, TaskResult]) -> None:
        self.tasks.write_text(json.dumps({k: v.model_dump() for k, v in tasks.items()}))

    def partial_tasks(self) -> dict[str, TaskResult]:
        """Task results a worker finished before it died (kept in a failed record)."""
        if not self.tasks.exists():
            return {}
        return {k: TaskResult.model_validate(v) for k, v in json.loads(self.tasks.read_text()).items()}

    def clear(self) -> None:
        """Forget a previous attempt's outcome before a new one starts."""
        for stale in (self.record, self.tasks, self.stage):
            stale.unlink(missing_ok=True)


def read_job(path: Path) -> Job:
    spec = json.loads(Path(path).read_text())
    return Job(spec["config"], spec["key"], spec["evaluation_key"], Path(spec["job_dir"]), bool(spec.get("is_reference")),
               spec.get("baseline"), spec.get("reference_key"))
