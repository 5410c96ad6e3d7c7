"""What the analysis around a verdict cannot know after an adaptive search (issue 22, point 3).

Sensitivity, the runner-up and the sample-size advice re-read the completed records. An adaptive
search leaves two kinds of variant without a full evaluation: those stopped early (a floor was out
of reach at the search's level) and those not needed (pruned: planned larger than an eligible one,
or below a fixed sequence's stop). Either may change what the analysis would say:

- floors moved down: a smaller variant stopped early might pass them (its full set is unknown);
- the winner changing to a larger variant, or to none: a variant not needed between the two was
  never measured and might have been it.

Floors moved up leave the stopped variants out (they missed the lower floors, at the search's
level) and an unchanged winner needs nothing unmeasured. `unknown_reason` says, for one analysis
row, which variant makes it unknowable, or "" when it stands.

"Smaller" and "between" are by size only under objective weight_memory, the one the plan knows
for every variant. Under latency, cost or cost_at_traffic a variant's objective is known only once
measured (bf16 can decode faster than int4), so every stopped or not-needed variant might rank
above the winner (issue 36, point 5).
"""

from __future__ import annotations

from selector.selection.precision import record_bits, record_params
from selector.records import RunRecord


def size(record: RunRecord) -> float:
    """The size ladder's measure, known for every variant (bytes of weights, as planned)."""
    return record_params(record) * max(record_bits(record), 1)


SIZED = "weight_memory"  # the objective whose order the plan knows before anything is measured


def unknown_reason(records: list[RunRecord], delta: float, baseline: str | None, winner: str | None,
                   objective: str = SIZED) -> str:
    """Why the sensitivity row (floors moved by delta; winner under them) cannot be known, or ""."""
    by_name = {r.name: r for r in records}
    stopped = [r for r in records if r.status == "stopped"]
    pruned = [r for r in records if r.status == "not_needed"]
    ceiling = size(by_name[winner]) if winner in by_name and objective == SIZED else float("inf")
    if delta < 0:
        below = [r for r in stopped if size(r) < ceiling]
        if below:
            names = ", ".join(r.name for r in sorted(below, key=size))
            return (f"cannot be computed: {names} stopped early and might pass floors {abs(delta) * 100:.0f} points "
                    f"lower{_unsized(objective)}")
    if winner != baseline:
        between = [r for r in pruned if size(r) < ceiling]
        if between:
            names = ", ".join(r.name for r in sorted(between, key=size))
            return (f"cannot be computed: {names} not measured (not needed by the search) and might be the winner "
                    f"here{_unsized(objective)}")
    return ""


def _unsized(objective: str) -> str:
    return "" if objective == SIZED else f" (its {objective} is unknown until measured)"


def runner_up_unknown(records: list[RunRecord], winner: str | None, runner_up: str | None,
                      objective: str = SIZED) -> str:
    """Why the sample-size advice between the winner and its runner-up misses the real runner-up:
    a variant just below the winner that the search stopped early (under an objective other than
    weight memory: any stopped variant), or "" when there is none."""
    by_name = {r.name: r for r in records}
    if winner not in by_name:
        return ""
    if objective != SIZED:  # any stopped variant might rank next to the winner
        stopped = sorted(r.name for r in records if r.status == "stopped" and r.name != winner)
        if not stopped:
            return ""
        return (f"{', '.join(stopped)} stopped early, and their {objective} is unknown until measured: which "
                "variant ranks next to the winner, and how many items would tell the two apart, cannot be "
                "computed from a partial evaluation")
    top = size(by_name[winner])
    floor = size(by_name[runner_up]) if runner_up in by_name and size(by_name[runner_up]) < top else -1.0
    closer = [r for r in records if r.status == "stopped" and floor < size(r) < top]
    if not closer:
        return ""
    nearest = max(closer, key=size)
    seen = f" after {nearest.search.items_evaluated} of {nearest.search.items_total} items" if nearest.search else ""
    return (f"the variant just below the winner, {nearest.name}, was stopped early{seen}: how many items would tell "
            "the two apart cannot be computed from a partial evaluation")
