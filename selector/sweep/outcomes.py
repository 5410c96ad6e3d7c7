"""Between two waves of an adaptive search: the variants as the search sees them, and what each run
came to, judged by the same selection that makes the final recommendation (so "eligible" here
means exactly what it means in the report)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from selector.search.candidates import Candidate, Outcome, Shortfall
from selector.records import RunRecord
from selector.sweep.state import PlannedEntry
from selector.variant.evaluation import stopped_shortfall


def candidates(variants: list[PlannedEntry]) -> list[Candidate]:
    """The planned variants (sweep.json) as search candidates."""
    return [Candidate(v.name, v.planned_bytes, v.model, v.needs_quantization, v.is_baseline, v.available)
            for v in variants]


def fixed_sequence(variants: list[PlannedEntry]) -> list[str]:
    """The order the selection's fixed sequence walks (selection.sequence.ladder_order), from the
    plan: the model's nominal parameters and the precision's bits, as the records will give them. A
    model without params_b (one named on the command line) is sized from the planned weights of its
    widest precision, one figure for all its precisions (the worker records one parameter count per
    model, from the checkpoint)."""
    from selector.selection.precision import precision_bits
    from selector.selection.sequence import ladder_order

    def bits(v: PlannedEntry) -> int:
        precision = (v.config or {}).get("precision") or {}
        return precision_bits(v.precision or v.name.split("/", 1)[1], precision.get("bits"))

    estimated: dict[str, float] = {}
    for v in sorted(variants, key=bits):  # the widest precision last: its estimate stands
        estimated[v.model] = v.planned_bytes * 8 / max(bits(v), 1)
    return ladder_order((v.name, v.params or estimated[v.model], bits(v)) for v in variants)


def outcomes(base: Path, policy: Any, names: tuple[str, ...]) -> dict[str, Outcome]:
    """Each named variant's outcome from the records under the sweep folder."""
    from selector.selection import select
    from selector.sweep.judging import gather_records

    records = {r.name: r for r in sorted(gather_records(base), key=lambda r: r.finished_at)}
    verdicts = {v.variant: v for v in select(list(records.values()), policy).verdicts} if records else {}
    return {name: outcome_of(records.get(name), verdicts.get(name), policy) for name in names}


def outcome_of(record: RunRecord | None, verdict: Any, policy: Any) -> Outcome:
    """What one run came to, for the search: its status, the objective it measured, whether the fixed
    sequence tests it (selection.sequence.in_sequence) and how far below a floor it fell."""
    from selector.selection.sequence import in_sequence

    if record is None:
        return Outcome("failed", "the job ended without a record")
    items = record.search.items_evaluated if record.search else None
    if record.status == "stopped":
        return Outcome("stopped", record.reason, items=items, in_sequence=in_sequence(record, policy),
                       shortfall=stopped_shortfall(record))
    if record.status in ("failed", "skipped"):
        return Outcome(record.status, record.reason, items=items)
    if verdict is not None and verdict.status in ("winner", "eligible"):
        measured = (record.memory.weight_bytes if policy.objective == "weight_memory" and record.memory
                    else verdict.objective)  # fmt: skip
        if measured is None:
            return Outcome("rejected", "eligible but its objective was not measured", items=items)
        return Outcome("eligible", "meets every floor", measured=float(measured), items=items)
    reason = verdict.reasons[0] if verdict is not None and verdict.reasons else "does not meet the policy"
    return Outcome("rejected", reason, items=items, in_sequence=in_sequence(record, policy),
                   shortfall=_full_set_shortfall(record, verdict))


def _full_set_shortfall(record: RunRecord, verdict: Any) -> Shortfall | None:
    """The floor a fully evaluated variant misses by the most, by its full-set score (under
    lower_bound the check reads the interval's end; the score itself is what a sibling must beat)."""
    from selector.selection.checks import check_task

    found = []
    for check in verdict.checks if verdict is not None else []:
        task = check_task(check)
        if check.passed or task is None or not check.name.startswith("accuracy:") or task not in record.tasks:
            continue
        result = record.tasks[task]
        found.append(Shortfall(task, result.value, check.limit, result.higher_is_better, anytime=False))
    return max(found, key=lambda s: s.gap) if found else None
