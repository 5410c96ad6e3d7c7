"""The tracker interface: one parent run per sweep, one child run per variant.

The sweep never talks to a tracking library directly; `NullTracker` keeps everything working
(records and reports on disk) when no tracker is configured.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from selector.records import RunRecord


@dataclass(frozen=True)
class EvalsetInfo:
    """The eval set a variant was scored on, for the tracker to record as its dataset input."""

    name: str
    path: str
    tasks: Any  # list[selector.tasks.Task]
    digest: str


class Tracker(Protocol):
    uri: str

    def start_sweep(self, sweep_key: str, name: str, params: dict[str, Any], tags: dict[str, str],
                    config: dict[str, Any] | None = None) -> str | None:
        """Open (or reopen, to resume) the sweep's parent run, keeping the sweep's config; return its id."""
        ...

    def load_sweep_config(self, parent_id: str) -> dict[str, Any] | None:
        """The config a sweep was started with (None for sweeps recorded before it was kept)."""
        ...

    def start_variant(self, parent_id: str | None, record_name: str, key: str, tags: dict[str, str]) -> str | None: ...

    def finish_variant(self, run_id: str | None, record: RunRecord, artifacts: list[Path],
                       evalset: EvalsetInfo | None = None) -> None: ...

    def parent_of(self, run_id: str) -> str | None:
        """The sweep run a variant run belongs to."""
        ...

    def mark_killed(self, run_ids: list[str | None]) -> None:
        """End these runs as KILLED (the sweep was interrupted while they ran)."""
        ...

    def log_metrics(self, run_id: str | None, metrics: dict[str, float]) -> None:
        """Add metrics to a finished run (figures only known once the whole sweep is in)."""
        ...

    def find_completed(self, parent_id: str | None, key: str) -> RunRecord | None:
        """A completed record for this variant key under this sweep, if one was logged."""
        ...

    def mark_interrupted(self, parent_id: str | None) -> int:
        """Children left RUNNING by a killed sweep become KILLED; returns how many."""
        ...

    def finish_sweep(self, parent_id: str | None, metrics: dict[str, float], tags: dict[str, str],
                     artifacts: list[Path], status: str = "FINISHED") -> None: ...

    def load_records(self, parent_id: str) -> list[RunRecord]: ...

    def ui_hint(self, parent_id: str | None, child_ids: list[str]) -> list[str]:
        """Lines telling a person how to open the sweep in the tracker's UI (none without one)."""
        ...


class NullTracker:
    uri = ""

    def start_sweep(self, sweep_key, name, params, tags, config=None):  # type: ignore[no-untyped-def]
        return None

    def load_sweep_config(self, parent_id):  # type: ignore[no-untyped-def]
        return None

    def start_variant(self, parent_id, record_name, key, tags):  # type: ignore[no-untyped-def]
        return None

    def finish_variant(self, run_id, record, artifacts, evalset=None):  # type: ignore[no-untyped-def]
        return None

    def log_metrics(self, run_id, metrics):  # type: ignore[no-untyped-def]
        return None

    def parent_of(self, run_id):  # type: ignore[no-untyped-def]
        return None

    def mark_killed(self, run_ids):  # type: ignore[no-untyped-def]
        return None

    def find_completed(self, parent_id, key):  # type: ignore[no-untyped-def]
        return None

    def mark_interrupted(self, parent_id):  # type: ignore[no-untyped-def]
        return 0

    def finish_sweep(self, parent_id, metrics, tags, artifacts, status="FINISHED"):  # type: ignore[no-untyped-def]
        return None

    def ui_hint(self, parent_id, child_ids):  # type: ignore[no-untyped-def]
        return []

    def load_records(self, parent_id):  # type: ignore[no-untyped-def]
        raise ValueError("no tracker is configured (tracker=none): load records from the sweep folder instead")
