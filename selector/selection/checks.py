"""Constraints applied to one variant: accuracy floors under a decision rule, non-inferiority to
the reference, memory budgets and latency limits. Each becomes a Check with a one-line detail.
"""

from __future__ import annotations

from selector.config import PolicyConfig
from selector.errors import ConfigError
from selector.selection.evidence import Evidence
from selector.selection.measures import (
    latency_value,
    parse_latency_key,
    PROCESS_PEAK,
    peak_memory_gb,
    serving_peak,
    weight_gb,
)
from selector.records import RunRecord
from selector.records_answers import check_level_key
from selector.stats_paired import noninferiority_exact_p
from selector.verdicts import Check

RULES = ("point", "lower_bound", "non_inferiority")
OBJECTIVES = ("weight_memory", "latency", "cost", "cost_at_traffic")
CI_METHODS = ("wilson", "bootstrap", "exact")
WEIGHTED = "weighted"  # a floor under this name applies to the weighted mean score
EPS = 1e-9  # 18/30 must meet a 0.6 floor despite float rounding


def validate_policy(policy: PolicyConfig) -> None:
    """Refuse a policy that cannot be applied, naming the field at fault."""

    def bad(field: str, problem: str) -> ConfigError:
        return ConfigError("policy", field=field, problem=problem)

    for field, value, allowed in (
        ("rule", policy.rule, RULES),
        ("objective", policy.objective, OBJECTIVES),
        ("ci_method", policy.ci_method, CI_METHODS),
        ("winner_control", policy.winner_control, ("none", "fixed_sequence")),
    ):
        if value not in allowed:
            raise bad(field, f"unknown value {value!r}; choose one of {', '.join(allowed)}")
    if not 0.5 < policy.confidence < 1.0:  # its alpha, 1 - confidence, must lie in (0, 0.5)
        raise bad("confidence", f"must lie in (0.5, 1) (its alpha, 1 - confidence, in (0, 0.5)), got {policy.confidence}")
    floors = dict(policy.floors)
    if policy.default_floor is not None:
        floors["<default_floor>"] = policy.default_floor
    for task, floor in floors.items():
        if floor is not None and not 0.0 <= floor <= 1.0:
            field = "default_floor" if task == "<default_floor>" else f"floors.{task}"
            raise bad(field, f"floors are fractions (0.8 = 80%), got {floor}")
    for task, margin in {**policy.margins, "<default>": policy.default_margin}.items():
        if margin < 0:
            field = "default_margin" if task == "<default>" else f"margins.{task}"
            raise bad(field, f"a margin is an allowed drop (>= 0), got {margin}")
    for task, weight in policy.weights.items():
        if weight < 0:
            raise bad(f"weights.{task}", f"weights must be >= 0, got {weight}")
    for field, budget in (("max_weight_gb", policy.max_weight_gb), ("max_memory_gb", policy.max_memory_gb)):
        if budget is not None and budget <= 0:
            raise bad(field, f"a memory budget must be > 0 GB, got {budget}")
    for key in policy.latency_limits:
        parse_latency_key(key)
    if (problem := check_level_key(policy.floors_under_load)) is not None:
        raise bad("floors_under_load", problem)
    if policy.objective == "cost" and not policy.price_per_hour:
        raise bad("price_per_hour", "objective=cost needs the hardware price in USD per hour")
    if policy.objective == "cost_at_traffic":
        if not policy.traffic_rps:
            raise bad("traffic_rps", "objective=cost_at_traffic needs your peak traffic in requests/s")
        if policy.cost_per_hour is None and policy.price_per_hour is None:
            raise bad("cost_per_hour", "objective=cost_at_traffic needs the price of one machine in USD per hour")
    for field, value in (("traffic_rps", policy.traffic_rps), ("cost_per_hour", policy.cost_per_hour)):
        if value is not None and value <= 0:
            raise bad(field, f"must be > 0, got {value}")


def effective_floors(policy: PolicyConfig, tasks: list[str]) -> dict[str, float]:
    """Task -> floor: named floors, else default_floor; the 'weighted' floor when set."""
    floors: dict[str, float] = {}
    for task in sorted(set(tasks) | set(policy.floors)):
        floor = policy.floors.get(task, None if task == WEIGHTED else policy.default_floor)
        if floor is not None:
            floors[task] = floor
    return floors


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _points(x: float) -> str:
    return f"{100 * x:.1f} points"


def accuracy_check(ev: Evidence, task: str, floor: float, rule: str, confidence: float) -> Check:
    """A floor on one task; under lower_bound the interval's pessimistic end must clear it.

    Metrics where lower is better (an error rate) read the floor as a ceiling."""
    name = f"accuracy:{task}"
    if task == WEIGHTED:
        value, higher, rule = ev.score, True, "point"  # no interval for a weighted mix
    else:
        result = ev.record.tasks.get(task)
        if result is None:
            return Check(name=name, value=None, limit=floor, passed=False, rule=rule,
                         detail=f"{task}: not measured")  # fmt: skip
        higher = result.higher_is_better
        value = result.value
        if rule == "lower_bound":
            interval = ev.intervals[task]
            value = interval.low if higher else interval.high
    if value is None:
        return Check(name=name, value=None, limit=floor, passed=False, rule=rule,
                     detail=f"{task}: not measured")  # fmt: skip
    passed = value >= floor - EPS if higher else value <= floor + EPS
    what = f"{task}: {_pct(value)}"
    if rule == "lower_bound":
        what = f"{task}: lower bound {_pct(value)} ({confidence:.0%} CI)" if higher else \
            f"{task}: upper bound {_pct(value)} ({confidence:.0%} CI)"  # fmt: skip
    kind = "floor" if higher else "ceiling"
    if passed:
        detail = f"{what} {'>=' if higher else '<='} {kind} {_pct(floor)}"
    else:
        gap = f"{_points(abs(value - floor))} {'short' if higher else 'over'}"
        detail = f"{what} {'<' if higher else '>'} {kind} {_pct(floor)} ({gap})"
    return Check(name=name, value=value, limit=floor, passed=passed, rule=rule, detail=detail)


def non_inferiority_check(ev: Evidence, task: str, margin: float, reference: str, confidence: float) -> Check:
    """The variant's drop against the reference must stay within the margin at the policy's
    confidence: the two-sided interval's pessimistic end (variant minus reference) >= -margin."""
    name = f"non_inferiority:{task}"
    if ev.name == reference:
        return Check(name=name, value=0.0, limit=-margin, passed=True, rule="non_inferiority",
                     detail=f"{task}: the reference itself")  # fmt: skip
    result = ev.record.tasks.get(task)
    diff = ev.paired.get(task) or ev.unpaired.get(task)
    if result is None or diff is None:
        return Check(name=name, value=None, limit=-margin, passed=False, rule="non_inferiority",
                     detail=f"{task}: not measured")  # fmt: skip
    higher = result.higher_is_better
    bound = diff.ci_low if higher else -diff.ci_high  # oriented so that negative = worse
    passed = bound >= -margin - EPS
    how = "paired" if task in ev.paired else "unpaired"
    exact = ""
    if passed and getattr(diff, "method", "") == "tango":
        # Tango's interval runs a little over its level at some n (2.6% for 2.5%); the exact
        # unconditional test at the margin does not, so both must pass (stats_paired).
        gained, lost = (diff.flips_to_right, diff.flips_to_wrong) if higher else (diff.flips_to_wrong, diff.flips_to_right)
        p = noninferiority_exact_p(gained, lost, diff.n, margin)
        passed = p <= (1 - confidence) / 2 + EPS
        exact = f"; exact test p {p:.3g}" + ("" if passed else f" > {(1 - confidence) / 2:.3g}")
    method = getattr(diff, "method", "bootstrap") if how == "paired" else "Newcombe"
    detail = (
        f"{task}: {diff.diff * 100:+.1f} points vs {reference} ({confidence:.0%} CI "
        f"{diff.ci_low * 100:+.1f} to {diff.ci_high * 100:+.1f}, {how}, {method}{exact}); "
        + (f"within the {100 * margin:.1f}-point margin" if passed
           else f"not shown within the {100 * margin:.1f}-point margin" if bound >= -margin - EPS
           else f"worse end {bound * 100:+.1f} points is beyond the {100 * margin:.1f}-point margin")
    )  # fmt: skip
    return Check(name=name, value=bound, limit=-margin, passed=passed, rule="non_inferiority", detail=detail)


def budget_check(name: str, label: str, value: float | None, limit: float, unit: str, digits: int) -> Check:
    if value is None:
        return Check(name=name, value=None, limit=limit, passed=False, rule="max",
                     detail=f"{label}: not measured")  # fmt: skip
    passed = value <= limit + EPS
    op = "<=" if passed else ">"
    word = "budget" if unit == "GB" else "limit"
    detail = f"{label} {value:.{digits}f} {unit} {op} {word} {limit:.{digits}f} {unit}"
    return Check(name=name, value=value, limit=limit, passed=passed, rule="max", detail=detail)


def build_checks(
    ev: Evidence, policy: PolicyConfig, tasks: list[str], reference: Evidence | None
) -> list[Check]:
    """Every constraint of the policy, applied to one completed variant, in a stable order."""
    floor_rule = "point" if policy.rule == "non_inferiority" else policy.rule
    checks = [
        accuracy_check(ev, task, floor, floor_rule, policy.confidence)
        for task, floor in effective_floors(policy, tasks).items()
    ]
    if policy.rule == "non_inferiority" and reference is not None:
        for task in sorted(reference.record.tasks):  # what the reference measured is the yardstick
            margin = policy.margins.get(task, policy.default_margin)
            checks.append(non_inferiority_check(ev, task, margin, reference.name, policy.confidence))
    return checks + measured_checks(ev.record, policy)


def measured_checks(record: RunRecord, policy: PolicyConfig) -> list[Check]:
    """The memory budgets and latency limits: measurements of the variant, not hypotheses about its
    accuracy (the fixed sequence tests only the latter, selection.sequence)."""
    checks = []
    if policy.max_weight_gb is not None:
        checks.append(budget_check("max_weight_gb", "weight", weight_gb(record),
                                   policy.max_weight_gb, "GB", 2))  # fmt: skip
    if policy.max_memory_gb is not None:
        label = "process peak (older record)" if serving_peak(record)[1] == PROCESS_PEAK else "serving peak"
        checks.append(budget_check("max_memory_gb", label, peak_memory_gb(record),
                                   policy.max_memory_gb, "GB", 2))  # fmt: skip
    for key, limit in sorted(policy.latency_limits.items()):
        value = latency_value(record, parse_latency_key(key))
        checks.append(budget_check(f"latency:{key}", key, value, limit, "ms", 0))
    return checks


def is_hypothesis(check: Check) -> bool:
    """An accuracy floor (at rest, or under load: accuracy@<level>:<task>) or a non-inferiority
    margin: a claim about the variant's accuracy that the policy's level controls (and the fixed
    sequence walks), as opposed to a measured constraint."""
    return check.name.startswith(("accuracy:", "accuracy@", "non_inferiority:"))


def check_task(check: Check) -> str | None:
    """The task an accuracy or non-inferiority check is about."""
    kind, _, task = check.name.partition(":")
    return task if kind in ("accuracy", "non_inferiority") and task != WEIGHTED else None
