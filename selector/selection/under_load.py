"""Answers under load in the verdict (docs/load-testing.md, "Answers under load").

With policy.floors_under_load=<level> (c8, r2.5, or capacity: the capacity search's confirmation
run at the planned rate) every floor of a generation task is judged a second time, on the answers
at that load level, by the same rule as at rest (under non_inferiority: as the floors are, by the
point rule); a check named accuracy@<level>:<task>. Multiple-choice tasks are not: their
evaluation ranks the choices by log-likelihood, and a load test generates. Without it, the
verdict warns about each variant whose answers under load differ significantly from its answers at
rest: the paired tests of its ladder's levels and confirmation run (per task), Holm-adjusted over
all of them, any below 1 - policy.confidence.
"""

from __future__ import annotations

from typing import Any

from selector.config import LoadConfig, PolicyConfig
from selector.records import RunRecord, TaskResult
from selector.records_answers import CAPACITY, LoadAnswers, level_key
from selector.verdicts import Check

PREFIX = "accuracy@"  # a floor judged under load: accuracy@c8:arithmetic


def planned_levels(load: LoadConfig) -> list[str]:
    """The level keys whose answers a load test with these settings scores: its ladder's (c<N>,
    r<R>) and, with a capacity search that runs a confirmation, capacity; none for a request file
    (its rows are not eval items)."""
    if load.requests:
        return []
    keys = []
    if load.enabled:
        keys += [level_key(int(c), None) for c in load.concurrency]
        keys += [level_key(None, float(r)) for r in load.rates_rps]
    if load.capacity and load.confirm_s > 0:
        keys.append(CAPACITY)
    return keys


def floors_under_load_problem(policy: PolicyConfig, load: LoadConfig, tasks: list[Any]) -> str | None:
    """Before anything loads: why policy.floors_under_load cannot be judged with this load test and
    these tasks (None: it can). tasks: the eval set's, as loaded."""
    key = policy.floors_under_load
    if key is None:
        return None
    levels = planned_levels(load)
    if key not in levels:
        if load.requests:
            return (f"the load test sends measure.load.requests ({load.requests}), whose rows are not eval items: "
                    "no level has answers to judge the floors on")
        if not levels:
            return ("the load test runs no level (measure.load.enabled=false, and no capacity search with a "
                    "confirmation run)")
        return f"the load test runs no level {key}; its levels: {', '.join(levels)}"
    from selector.selection.checks import effective_floors

    floored = effective_floors(policy, [t.name for t in tasks])
    generated = [t for t in tasks if t.type == "generate" and t.name in floored]
    if not generated:
        return ("no floor to judge under load: the policy sets no floor on a generation task (a multiple-choice "
                "task's floor is judged at rest only)")
    cut = [t for t in generated if t.max_new_tokens > load.new_tokens]
    if cut:
        longest = max(t.max_new_tokens for t in cut)
        return (f"the floor of {', '.join(t.name for t in cut)} cannot be judged under load: measure.load.new_tokens="
                f"{load.new_tokens} is shorter than its answers ({longest} tokens), which would be cut; set "
                f"measure.load.new_tokens={longest}")
    return None


def answer_levels(record: RunRecord) -> dict[str, LoadAnswers]:
    """The record's levels with answers, by key: the ladder's levels and the confirmation run."""
    from selector.selection.cost import planning_capacity

    out: dict[str, LoadAnswers] = {}
    for level in record.perf.load if record.perf else []:
        if level.answers is not None:
            out[level_key(level.concurrency, level.rate_rps, level.replay_scale)] = level.answers
    capacity = planning_capacity(record)
    trial = capacity.confirmation if capacity is not None else None
    if trial is not None and trial.level.answers is not None:
        out[CAPACITY] = trial.level.answers
    return out


def load_checks(ev: Any, policy: PolicyConfig, tasks: list[str], n_resamples: int = 2000, seed: int = 0
                ) -> list[Check]:
    """The floors judged on the answers at policy.floors_under_load, one check per floored
    generation task, by accuracy_check's own rule and words."""
    from selector.selection.checks import WEIGHTED, accuracy_check, effective_floors
    from selector.selection.evidence import Evidence, task_interval

    key = policy.floors_under_load
    if not key:
        return []
    rule = "point" if policy.rule == "non_inferiority" else policy.rule
    levels = answer_levels(ev.record)
    answers = levels.get(key)
    checks = []
    for task, floor in effective_floors(policy, tasks).items():
        if task == WEIGHTED or _multiple_choice(ev.record, task):
            continue
        name = f"{PREFIX}{key}:{task}"
        found = answers.tasks.get(task) if answers is not None else None
        if found is None or found.value is None:
            why = (found.note if found is not None and found.note else
                   f"its load test has no answers at {key}" + (f" (it has {', '.join(levels)})" if levels else ""))
            checks.append(Check(name=name, value=None, limit=floor, passed=False, rule=rule,
                                detail=f"{task} under load at {key}: not measured ({why})"))
            continue
        result = TaskResult(task=task, metric=found.metric, value=found.value, ci_low=found.ci_low or 0.0,
                            ci_high=found.ci_high or 1.0, n=found.items, higher_is_better=found.higher_is_better,
                            ci_method=found.ci_method or "exact", item_scores=found.item_scores)
        shadow = Evidence(ev.record.model_copy(update={"tasks": {task: result}}),
                          intervals={task: task_interval(result, policy.confidence, policy.ci_method, n_resamples,
                                                         seed)})
        check = accuracy_check(shadow, task, floor, rule, policy.confidence)  # "<task>: 37.5% < floor 50.0% (...)"
        said = check.detail.removeprefix(f"{task}: ")
        checks.append(check.model_copy(update={"name": name,
                                               "detail": f"{task} under load at {key} ({found.items} items): {said}"}))
    return checks


def _multiple_choice(record: RunRecord, task: str) -> bool:
    from selector.registry import UnknownNameError
    from selector.tasks.metrics import METRICS

    result = record.tasks.get(task)
    try:
        return result is not None and bool(METRICS.get(result.metric).multiple_choice)
    except UnknownNameError:
        return False


def load_warnings(records: list[RunRecord], policy: PolicyConfig) -> list[str]:
    """Without policy.floors_under_load: one line per completed variant whose answers under load
    differ significantly from those at rest (Holm over its levels' and tasks' paired tests)."""
    from selector.stats_paired import holm

    if policy.floors_under_load:
        return []
    alpha = 1 - policy.confidence
    out = []
    for record in records:
        if record.status != "completed":
            continue
        tests = [(key, task, t) for key, answers in answer_levels(record).items()
                 for task, t in answers.tasks.items() if t.p_value is not None]
        if not tests:
            continue
        adjusted = holm([t.p_value for _, _, t in tests])  # type: ignore[misc]
        worst = min(range(len(tests)), key=lambda i: adjusted[i])
        if adjusted[worst] >= alpha:
            continue
        key, task, t = tests[worst]
        moved = sum(a < alpha for a in adjusted)
        more = f" (and {moved - 1} more level and task{'s' if moved > 2 else ''})" if moved > 1 else ""
        test = "McNemar" if t.test == "mcnemar" else "Wilcoxon"
        out.append(f"{record.name}: answers under load differ from its answers at rest: {task} at {key} "
                   f"{t.value:.1%} against {t.at_rest:.1%} at rest on the same {t.items} items, {t.changed} of "
                   f"{t.compared} answers changed ({test} p {t.p_value:.3g}, {adjusted[worst]:.3g} after Holm over "
                   f"its {len(tests)} tests){more}. The verdict judges the floors at rest; "
                   f"policy.floors_under_load={key} judges them there too.")
    return out
