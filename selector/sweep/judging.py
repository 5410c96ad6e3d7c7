"""A sweep folder's records, and the selection and report made from them: shared by the end of a
sweep (sweep.end) and by sweeps read back later (sweep.stored)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from selector.config import SelectorConfig
from selector.records import RunRecord, SampleRecord
from selector.sweep.state import SweepState
from selector.verdicts import Selection


def gather_records(base: Path) -> list[RunRecord]:
    """Every job's record under a sweep folder, one per variant key (the newest wins)."""
    by_key: dict[str, tuple[float, RunRecord]] = {}
    for path in sorted(base.rglob("record.json")):
        record = RunRecord.load(path)
        mtime = path.stat().st_mtime
        if record.key not in by_key or by_key[record.key][0] < mtime:
            by_key[record.key] = (mtime, record)
    return [r for _, r in by_key.values()]


def report_context(cfg: SelectorConfig, state: SweepState, base: Path, wall_s: float) -> dict[str, Any]:
    from selector.config import to_dict
    from selector.measure.environment import environment

    return {
        "experiment": cfg.experiment,
        "tracking_uri": state.tracking_uri,
        "parent_run_id": state.parent_run_id,
        "sweep_dir": str(base),
        "config": to_dict(cfg),
        "environment": environment(),
        "wall_time_s": wall_s,
    }


def select_and_report(records: list[RunRecord], cfg: SelectorConfig, context: dict[str, Any], out: Path,
                      samples: dict[str, list[SampleRecord]] | None = None) -> tuple[Selection, dict[str, Path]]:
    from selector.report import write_report
    from selector.selection import select

    selection = select(records, cfg.policy)
    paths = write_report(records, selection, context, out, samples=samples)
    return selection, paths
