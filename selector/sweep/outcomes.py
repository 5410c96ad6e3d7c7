"""Between two waves of an adaptive search: the variants as the search sees them, and what each run
came to, judged by the same selection that makes the final recommendation (so "eligible" here
means exactly what it means in the report)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from selector.search.driver import Candidate, Outcome
from selector.records import RunRecord
from selector.sweep.state import PlannedEntry


def candidates(variants: list[PlannedEntry]) -> list[Candidate]:
    """The planned variants (sweep.json) as search candidates."""
    return [Candidate(v.name, v.planned_bytes, v.model, v.needs_quantization, v.is_baseline, v.available)
            for v in variants]


def outcomes(base: Path, policy: Any, names: tuple[str, ...]) -> dict[str, Outcome]:
    """Each named variant's outcome from the records under the sweep folder."""
    from selector.selection import select
    from selector.sweep.judging import gather_records

    records = {r.name: r for r in sorted(gather_records(base), key=lambda r: r.finished_at)}
    verdicts = {v.variant: v for v in select(list(records.values()), policy).verdicts} if records else {}
    return {name: _outcome(records.get(name), verdicts.get(name), policy.objective) for name in names}


def _outcome(record: RunRecord | None, verdict: Any, objective: str) -> Outcome:
    if record is None:
        return Outcome("failed", "the job ended without a record")
    items = record.search.items_evaluated if record.search else None
    if record.status == "stopped":
        return Outcome("stopped", record.reason, items=items)
    if record.status in ("failed", "skipped"):
        return Outcome(record.status, record.reason, items=items)
    if verdict is not None and verdict.status in ("winner", "eligible"):
        measured = record.memory.weight_bytes if objective == "weight_memory" and record.memory else verdict.objective
        if measured is None:
            return Outcome("rejected", "eligible but its objective was not measured", items=items)
        return Outcome("eligible", "meets every floor", measured=float(measured), items=items)
    reason = verdict.reasons[0] if verdict is not None and verdict.reasons else "does not meet the policy"
    return Outcome("rejected", reason, items=items)
