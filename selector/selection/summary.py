"""The recommendation in one sentence, and the warnings a careful reader needs next to it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from selector.config import PolicyConfig
from selector.selection.checks import WEIGHTED, check_task
from selector.selection.cost import confirmation_words, duration_words, planning_capacity, traffic_sentence
from selector.selection.evidence import Evidence
from selector.selection.precision import record_bits
from selector.selection.ranking import OBJECTIVE_TEXT, Ranking, format_objective
from selector.records import RunRecord
from selector.verdicts import Check

if TYPE_CHECKING:
    from selector.engines.spec import Engine

SMALL_N = 30  # below this many items a task's interval is wide; say so
MAX_EVIDENCE_TASKS = 6  # keep the sentence readable


def _constraint_words(policy: PolicyConfig, checks: list[Check]) -> str:
    kinds = []
    names = [c.name for c in checks if c.rule != "info"]
    if any(n.startswith(("accuracy:", "accuracy@")) for n in names):
        kinds.append("floor" + (f" (at rest and at {policy.floors_under_load})"
                                if any(n.startswith("accuracy@") for n in names) else ""))
    if any(n.startswith("non_inferiority:") for n in names):
        kinds.append("margin")
    if any(n.startswith("max_") for n in names):
        kinds.append("budget")
    if any(n.startswith("latency:") for n in names):
        kinds.append("limit")
    if not kinds:
        return ""
    listed = kinds[0] if len(kinds) == 1 else ", ".join(kinds[:-1]) + " and " + kinds[-1]
    return f"every {listed}"


def _task_evidence(ev: Evidence, checks: list[Check], reference: str | None) -> str:
    """"sentiment 92% [84-96]" per constrained task, with "(-1.2 points [-3.0, +0.5] vs ref)"
    appended where a non-inferiority margin applies."""
    tasks = sorted({t for c in checks if (t := check_task(c)) is not None and t in ev.record.tasks})
    if not tasks:  # nothing constrains a task: show every task
        tasks = sorted(ev.record.tasks)
    parts = []
    for task in tasks:
        text = _task_value(ev, task)
        diff = ev.paired.get(task) or ev.unpaired.get(task)
        if diff is not None and any(c.name == f"non_inferiority:{task}" for c in checks):
            low, high = diff.ci_low * 100, diff.ci_high * 100
            text += f" ({diff.diff * 100:+.1f} points [{low:+.1f}, {high:+.1f}] vs {reference})"
        parts.append(text)
    if len(parts) > MAX_EVIDENCE_TASKS:
        parts = parts[:MAX_EVIDENCE_TASKS] + [f"and {len(parts) - MAX_EVIDENCE_TASKS} more"]
    return ", ".join(parts)


def _task_value(ev: Evidence, task: str) -> str:
    value, interval = ev.record.tasks[task].value, ev.intervals[task]
    return f"{task} {value * 100:.0f}% [{interval.low * 100:.0f}-{interval.high * 100:.0f}]"


def closest(ranking: Ranking, evidence: dict[str, Evidence]) -> str | None:
    """The rejected variant that misses the least: fewest failed checks, then smallest relative
    shortfall, then the better objective."""

    def shortfall(c: Check) -> float:
        if c.value is None:
            return 1.0
        return abs(c.value - c.limit) / max(abs(c.limit), 0.01)

    def key(name: str) -> tuple[int, float, float, str]:
        failed = ranking.failed(name)
        obj = ranking.objectives[name]
        return (len(failed), sum(map(shortfall, failed)), obj if obj is not None else float("inf"), name)

    rejected = [n for n in evidence if n not in ranking.ranked]
    return min(rejected, key=key) if rejected else None


def rejection_reasons(name: str, ranking: Ranking, policy: PolicyConfig) -> list[str]:
    reasons = [c.detail for c in ranking.failed(name)]
    if ranking.objectives[name] is None:
        what = OBJECTIVE_TEXT[policy.objective][0]
        reasons.append(f"{what} not measured: cannot rank on objective {policy.objective}"
                       + (" (it needs measure.load.capacity=true and a capacity within the SLO)"
                          if policy.objective == "cost_at_traffic" else ""))
    return reasons


def write_summary(
    records: list[RunRecord],
    evidence: dict[str, Evidence],
    ranking: Ranking,
    policy: PolicyConfig,
    reference: str | None,
) -> str:
    total = len(records)
    if not evidence:
        said = {"stopped": "stopped early below a floor", "not_needed": "not needed", "failed": "failed",
                "skipped": "skipped"}
        counts = {said[s]: sum(r.status == s for r in records) for s in said}
        detail = ", ".join(f"{k} {s}" for s, k in counts.items() if k)
        return f"No variant completed ({detail or 'no records'}): nothing to recommend."
    eligible = f"{len(ranking.ranked)} of {total} variant{'s' if total != 1 else ''} eligible"
    winner = ranking.winner
    if winner is not None:
        checks = ranking.checks[winner]
        adjective = OBJECTIVE_TEXT[policy.objective][2]
        objective = format_objective(policy.objective, ranking.objectives[winner])  # type: ignore[arg-type]
        meets = _constraint_words(policy, checks)
        that = f" that meets {meets}" if meets else ""
        traffic = traffic_sentence(evidence[winner].record, policy)
        what = ("the cheapest variant at your traffic" if policy.objective == "cost_at_traffic" and traffic
                else f"the {adjective} variant ({objective})")
        caveat = (" (ranked by a capacity its confirmation run did not hold)"
                  if policy.objective == "cost_at_traffic" and unconfirmed(evidence, ranking, policy) else "")
        return (
            f"Recommend {winner}: {what}{that}{caveat} — "
            f"{_task_evidence(evidence[winner], checks, reference)}; {eligible}."
            + (f" {traffic}." if traffic else "")
        )
    near = closest(ranking, evidence)
    assert near is not None  # evidence is non-empty and nothing is eligible
    words = _constraint_words(policy, ranking.checks[near]) or "constraint"
    misses = "; ".join(rejection_reasons(near, ranking, policy))
    if not ranking.failed(near):  # every constraint met, but the objective was not measured
        return f"No variant can be ranked on objective {policy.objective}: {near} {misses}; {eligible}."
    return f"No variant meets {words}: the closest, {near}, misses {misses}; {eligible}."


def collect_warnings(
    records: list[RunRecord],
    evidence: dict[str, Evidence],
    ranking: Ranking,
    policy: PolicyConfig,
    reference: Evidence | None,
    noise_floor: dict[str, float],
    sensitivity_rows: list[dict[str, Any]],
) -> list[str]:
    from selector.selection.under_load import load_warnings

    warnings: list[str] = engine_mismatch(records, policy) + missing_load(records) + load_warnings(records, policy)
    if evidence and reference is None:
        warnings.append("No reference: no completed variant has task results; nothing is compared pairwise.")
    if reference is not None:
        bits = record_bits(reference.record)
        if 0 < bits < 16:
            warnings.append(
                f"The reference {reference.name} is quantized ({bits}-bit): differences are measured "
                "against it, not against a full-precision model."
            )
        if not any(t.item_scores for t in reference.record.tasks.values()):
            warnings.append(
                f"The reference {reference.name} has no per-item scores: differences to it are "
                "unpaired (Newcombe intervals) and McNemar's test is not computed."
            )
    measured = {task for ev in evidence.values() for task in ev.record.tasks}
    for task in sorted(set(policy.floors) - measured - {WEIGHTED}):
        if evidence:
            warnings.append(
                f"A floor names {task!r}, which no completed variant measured: every variant fails it."
            )
    warnings += _small_n(evidence)
    warnings += unconfirmed(evidence, ranking, policy)
    if policy.ci_method == "bootstrap":
        lacking = sorted({f"{ev.name} ({task})" for ev in evidence.values()
                          for task, iv in ev.intervals.items() if iv.method != "bootstrap"})  # fmt: skip
        if lacking:
            used = ", ".join(lacking)
            warnings.append(f"ci_method=bootstrap needs per-item scores; used Wilson intervals for: {used}")
    warnings += _noise(evidence, ranking, noise_floor)
    unknown = [row for row in sensitivity_rows if row.get("note")]
    if unknown:
        moves = ", ".join(f"{row['task']} {row['delta'] * 100:+.0f}" for row in unknown)
        warnings.append(f"Sensitivity after an adaptive search: the winner under {moves} points "
                        f"{unknown[0]['note']}{' (and similar)' if len(unknown) > 1 else ''}.")
    for row in sensitivity_rows:
        if row["changed"]:
            which = "all floors move" if row["task"] == "all floors" else f"the {row['task']} floor moves"
            warnings.append(
                f"Fragile: the winner becomes {row['winner'] or 'none'} if {which} by "
                f"{row['delta'] * 100:+.0f} points."
            )
    return warnings


def unconfirmed(evidence: dict[str, Evidence], ranking: Ranking, policy: PolicyConfig) -> list[str]:
    """The winner's capacity whose confirmation run (the planned rate, for measure.load.confirm_s)
    broke the SLO: its plan is not offered, and a ranking on cost at the traffic stood on it."""
    winner = ranking.winner
    capacity = planning_capacity(evidence[winner].record) if winner is not None else None
    trial = capacity.confirmation if capacity is not None else None
    if trial is None or trial.held:
        return []
    length = duration_words(trial.window_s)
    ranked = (" The ranking on cost at your traffic used that capacity all the same."
              if policy.objective == "cost_at_traffic" else "")
    return [f"{winner}'s planned rate, {trial.rate_rps:.3g} req/s, did not hold for {length} on this machine "
            f"({confirmation_words(trial)}): no plan of machines is offered on it; re-run the capacity search, "
            f"or plan below {trial.rate_rps:.3g} req/s per machine.{ranked}"]


def _small_n(evidence: dict[str, Evidence]) -> list[str]:
    smallest: dict[str, int] = {}
    for ev in evidence.values():
        for task, result in ev.record.tasks.items():
            smallest[task] = min(smallest.get(task, result.n), result.n)
    return [
        f"{task}: only {n} items (fewer than {SMALL_N}): its intervals are wide."
        for task, n in sorted(smallest.items()) if n < SMALL_N
    ]  # fmt: skip


def _noise(evidence: dict[str, Evidence], ranking: Ranking, noise_floor: dict[str, float]) -> list[str]:
    """Verdicts that hinge on a margin smaller than the task's run-to-run spread: the winner
    clearing a floor narrowly, or a cheaper variant missing one narrowly."""
    if not noise_floor:
        return []
    out: list[str] = []
    winner = ranking.winner
    if winner is None:
        near = closest(ranking, evidence)
        candidates = [near] if near else []
    else:
        best = ranking.objectives[winner]
        candidates = [winner] + [
            name for name in evidence
            if name not in ranking.ranked and ranking.objectives[name] is not None
            and best is not None and ranking.objectives[name] < best  # type: ignore[operator]
        ]  # fmt: skip
    for name in candidates:
        for check in ranking.checks[name]:
            task = check_task(check)
            if task is None or check.value is None or task not in noise_floor:
                continue
            gap = abs(check.value - check.limit)
            if gap >= noise_floor[task]:
                continue
            verb = "clears" if check.passed else "misses"
            out.append(
                f"{name} {verb} {check.name} by {gap * 100:.1f} points, less than the {task} noise "
                f"floor ({noise_floor[task] * 100:.1f} points): a re-run could reverse it."
            )
    return out


def record_engine(record: RunRecord) -> Engine[Any] | None:
    """The engine (selector.engines.spec.Engine) that served the record, or None for a record from a
    selector with engines this one does not know."""
    from selector.engines import engine_for
    from selector.validate import typed_engine

    try:
        return engine_for(typed_engine((record.config or {}).get("engine") or {"kind": "hf"}))
    except Exception:
        return None


def measuring_engine(record: RunRecord) -> str | None:
    """What served the record's latency figures: hf (transformers in-process), the program a served
    engine started (vllm, ...), or None for an attached server (its engine is not known here)."""
    engine = record_engine(record)
    return None if engine is None else engine.deploy_name()


def engine_mismatch(records: list[RunRecord], policy: PolicyConfig) -> list[str]:
    """A warning when latency decides the verdict (limits, or a latency/cost objective) from figures
    of an engine other than the one the user deploys on (policy.deploy_engine)."""
    deploy = policy.deploy_engine or ""  # one spelling per engine, checked before the sweep ran
    decides = [f"latency limits {', '.join(sorted(policy.latency_limits))}"] if policy.latency_limits else []
    decides += [f"objective={policy.objective}"] if policy.objective in ("latency", "cost") else []
    if not deploy or not decides:
        return []
    other = sorted({str(engine.deploy_name()) for r in records
                    if r.perf and (engine := record_engine(r)) is not None and engine.is_deploy_engine(deploy) is False})
    if not other:
        return []
    shown = {"hf": "hf, transformers in-process"}
    engines = ", ".join(shown.get(e, e) for e in other)
    return [f"Latency decides this verdict ({' and '.join(decides)}) from figures measured on {engines}, but "
            f"policy.deploy_engine={deploy}: rankings flip between engines (in transformers, 4-bit AWQ decodes "
            f"slower than bf16; in vLLM, faster). Measure the candidates on {deploy} (engine=vllm, or "
            "engine=openai with its server) before trusting the latency ranking."]


def missing_load(records: list[RunRecord]) -> list[str]:
    """Variants the user asked load figures of (measure.load.enabled / capacity) that have none,
    because the adaptive search stopped or skipped them, and how to get them."""
    why = {"stopped": ("the adaptive search stopped them early below a floor", "search=grid"),
           "not_needed": ("the adaptive search did not need them (a smaller variant already qualified)",
                          "search.complete=true")}
    out = []
    for status, (reason, fix) in why.items():
        names = sorted(r.name for r in records if r.status == status and _asked_for_load(r))
        if names:
            out.append(f"No load figures for {', '.join(names)}, though measure.load asked for them: {reason}. "
                       f"Run again with {fix} to measure them.")
    return out


def _asked_for_load(record: RunRecord) -> bool:
    load = ((record.config or {}).get("measure") or {}).get("load") or {}
    return bool(load.get("enabled") or load.get("capacity"))
