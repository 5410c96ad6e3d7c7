"""What surrounds the verdict: Pareto fronts, how the winner moves with the floors, and how many
items would tell the winner from its runner-up."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from selector.config import PolicyConfig
from selector.selection.checks import effective_floors
from selector.selection.evidence import Evidence, is_binary
from selector.selection.ranking import Ranking, rank
from selector.selection.partial import runner_up_unknown, unknown_reason
from selector.stats import paired_mean_sample_size, paired_sample_size, two_proportion_sample_size
from selector.records import RunRecord

ALL_FLOORS = "all floors"
SENSITIVITY_DELTAS = (-0.02, 0.02)  # floors moved by two points either way


def pareto_front(points: dict[str, tuple[float, float]]) -> list[str]:
    """Names not dominated on (accuracy: higher is better, cost: lower is better), cheapest first.

    A point is dominated when another is at least as good on both axes and better on one."""
    front = [
        name for name, (acc, cost) in points.items()
        if not any(
            a >= acc and c <= cost and (a > acc or c < cost)
            for other, (a, c) in points.items() if other != name
        )
    ]  # fmt: skip
    return sorted(front, key=lambda n: (points[n][1], -points[n][0], n))


def sensitivity(
    evidence: dict[str, Evidence],
    policy: PolicyConfig,
    tasks: list[str],
    reference: Evidence | None,
    objectives: dict[str, float | None],
    deltas: tuple[float, ...] = SENSITIVITY_DELTAS,
    sequence: list[str] | None = None,
    records: list[RunRecord] | None = None,
) -> list[dict[str, Any]]:
    """The winner with each floor moved by each delta, then with all floors moved together.

    records: every record, stopped and not-needed ones included; a row they leave unknowable says
    so (selection.partial) and claims no winner and no change."""
    floors = effective_floors(policy, tasks)
    baseline = rank(evidence, policy, tasks, reference, objectives, sequence).winner

    def row(task: str, delta: float, moved: PolicyConfig, floor: float | None) -> dict[str, Any]:
        winner = rank(evidence, moved, tasks, reference, objectives, sequence).winner
        unknown = unknown_reason(records or [], delta, baseline, winner, policy.objective)
        if unknown:
            return {"task": task, "delta": delta, "floor": floor, "winner": None, "changed": False, "note": unknown}
        return {"task": task, "delta": delta, "floor": floor, "winner": winner,
                "changed": winner != baseline}  # fmt: skip

    rows = []
    for task, floor in floors.items():
        for delta in deltas:
            new = _clamp(floor + delta)
            rows.append(row(task, delta, replace(policy, floors={**policy.floors, task: new}), new))
    if floors:
        for delta in deltas:
            moved = replace(
                policy,
                floors={task: _clamp(f + delta) for task, f in floors.items()},
                default_floor=None if policy.default_floor is None else _clamp(policy.default_floor + delta),
            )
            rows.append(row(ALL_FLOORS, delta, moved, None))
    return rows


def _clamp(x: float) -> float:
    return round(min(1.0, max(0.0, x)), 10)


def runner_up(evidence: dict[str, Evidence], ranking: Ranking) -> str | None:
    """The next eligible variant; failing that, the rejected one just below the winner's objective."""
    winner = ranking.winner
    if winner is None:
        return None
    if len(ranking.ranked) > 1:
        return ranking.ranked[1]
    best = ranking.objectives[winner]
    smaller = [
        name for name in evidence
        if name not in ranking.ranked and ranking.objectives[name] is not None
        and best is not None and ranking.objectives[name] <= best  # type: ignore[operator]
    ]  # fmt: skip
    return max(smaller, key=lambda n: (ranking.objectives[n], n)) if smaller else None


def sample_size_advice(
    evidence: dict[str, Evidence], ranking: Ranking, confidence: float, power: float = 0.8,
    records: list[RunRecord] | None = None, objective: str = "weight_memory",
) -> list[dict[str, Any]]:
    """Per task: items needed to tell the winner from the runner-up at `confidence` with `power`.

    Paired when the two share item ids: 0/1 scores by McNemar's formula from the observed
    discordance (Connor 1987); fractional scores by the paired mean difference and the spread of
    the raw differences (no cut at 0.5). Else the two-proportion formula from their accuracies.
    needed is None when they are indistinguishable. When the search stopped a variant that might be
    the real runner-up early, one row says it cannot be computed (selection.partial)."""
    winner, other = ranking.winner, runner_up(evidence, ranking)
    missing = runner_up_unknown(records or [], winner, other, objective)
    if missing:
        return [{"variant": winner, "versus": None, "needed": None, "note": f"cannot be computed: {missing}"}]
    if winner is None or other is None:
        return []
    a, b = evidence[winner].record, evidence[other].record
    rows = []
    for task in sorted(a.tasks.keys() & b.tasks.keys()):
        ta, tb = a.tasks[task], b.tasks[task]
        shared = sorted(ta.item_scores.keys() & tb.item_scores.keys())
        if shared:
            va = np.array([ta.item_scores[i] for i in shared])
            vb = np.array([tb.item_scores[i] for i in shared])
            if is_binary(ta) and is_binary(tb) and np.all(np.isin(va, (0, 1))) and np.all(np.isin(vb, (0, 1))):
                p10, p01 = float(np.mean((va == 1) & (vb == 0))), float(np.mean((va == 0) & (vb == 1)))
                needed, method = paired_sample_size(p10, p01, confidence, power), "paired"
            else:
                d = va - vb
                needed = paired_mean_sample_size(float(d.mean()), float(d.std(ddof=1)) if d.size > 1 else 0.0,
                                                 confidence, power)  # fmt: skip
                method = "paired (mean difference)"
            n_now = len(shared)
        else:
            needed = two_proportion_sample_size(ta.value, tb.value, confidence, power)
            n_now, method = min(ta.n, tb.n), "two-proportion"
        items = None if math.isinf(needed) else math.ceil(needed)
        if items is None:
            note = "indistinguishable: no number of items separates them"
        elif items <= n_now:
            note = f"{n_now} items are enough"
        else:
            note = f"about {items} items needed (now {n_now})"
        rows.append({
            "task": task, "variant": winner, "versus": other, "accuracy": ta.value,
            "versus_accuracy": tb.value, "n": n_now, "needed": items, "method": method,
            "confidence": confidence, "power": power, "note": note,
        })  # fmt: skip
    return rows
