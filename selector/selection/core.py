"""select(): RunRecords + a policy -> a Selection. Pure and deterministic: no model, no I/O."""

from __future__ import annotations

import dataclasses
import math
from numbers import Real

from selector.config import PolicyConfig
from selector.errors import ConfigError
from selector.selection.analysis import pareto_front, sample_size_advice, sensitivity
from selector.selection.checks import validate_policy
from selector.selection import power
from selector.selection.evidence import Evidence, gather, is_binary, paired_diff
from selector.selection.settings import choose_settings
from selector.selection.measures import e2e_p50_ms, weight_gb
from selector.selection.precision import pick_baseline, pick_reference
from selector.selection.ranking import Ranking, format_objective, objective_value, rank
from selector.selection.sequence import ladder
from selector.selection.summary import collect_warnings, rejection_reasons, write_summary
from selector.records import RunRecord
from selector.verdicts import Selection, TaskInterval, Verdict

DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 0
_STATUS_ORDER = {"winner": 0, "eligible": 1, "rejected": 2, "stopped": 3, "failed": 4, "skipped": 5, "not_needed": 6}


def select(
    records: list[RunRecord],
    policy: PolicyConfig,
    noise_floor: dict[str, float] | None = None,
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> Selection:
    """Judge every variant against the policy and recommend the best-ranked eligible one.

    noise_floor: task -> score spread seen when nothing changed (fractions, 0.01 = 1 point);
    overrides what records carry under config["noise_floor"]."""
    validate_policy(policy)
    records, warnings = _dedupe(records)
    reference_record = pick_reference(records)
    evidence = gather(records, reference_record, policy, n_resamples, seed)
    reference = evidence.get(reference_record.name) if reference_record else None
    tasks = sorted({task for ev in evidence.values() for task in ev.record.tasks})
    objectives = {name: objective_value(ev.record, policy) for name, ev in evidence.items()}
    sequence = ladder(records, policy)
    ranking = rank(evidence, policy, tasks, reference, objectives, sequence)
    noise = _noise_floor(records, noise_floor)
    sens = sensitivity(evidence, policy, tasks, reference, objectives, sequence=sequence, records=records)
    ref_name = reference.name if reference else None
    return Selection(
        policy=dataclasses.asdict(policy),
        winner=ranking.winner,
        reference=ref_name,
        summary=write_summary(records, evidence, ranking, policy, ref_name),
        verdicts=_verdicts(records, evidence, ranking, policy),
        pareto=_pareto(evidence),
        sensitivity=sens,
        sample_size=sample_size_advice(evidence, ranking, policy.confidence, records=records,
                                       objective=policy.objective),
        noise_floor=noise,
        warnings=warnings + collect_warnings(records, evidence, ranking, policy, reference, noise, sens),
        settings=choose_settings(records, policy),
        power=(table := _power(evidence, ranking.winner, policy)),
        power_note=power.verdict_note(policy, table),
    )


def _power(evidence: dict[str, Evidence], winner: str | None, policy: PolicyConfig) -> list[dict]:
    """What the rule can tell apart at the sizes of the winner's tasks (else the largest measured),
    under non_inferiority at the winner's own share of answers flipping against the reference."""
    sizes: dict[str, tuple[int, bool, bool]] = {}
    for ev in sorted(evidence.values(), key=lambda ev: ev.name != winner):
        for task, result in ev.record.tasks.items():
            if task not in sizes or (ev.name != winner and result.n > sizes[task][0]):
                sizes[task] = (result.n, is_binary(result), result.higher_is_better)
        if ev.name == winner:
            break
    # the share itself, not rounded: 1 flip in 300 rounded to 0.00 read as identical answers (issue 50)
    flips = {task: (d.flips_to_wrong + d.flips_to_right) / d.n
             for task, d in (evidence[winner].paired.items() if winner else []) if d.method == "tango" and d.n}
    return power.rows(policy, sizes, flips)


def _dedupe(records: list[RunRecord]) -> tuple[list[RunRecord], list[str]]:
    """One record per variant: a completed one over a failed one, then the latest finished."""
    by_name: dict[str, RunRecord] = {}
    dupes: set[str] = set()
    for record in records:
        kept = by_name.get(record.name)
        if kept is not None:
            dupes.add(record.name)
            if _recency(kept) > _recency(record):
                continue
        by_name[record.name] = record
    warnings = [f"{name}: several records; kept the latest completed one." for name in sorted(dupes)]
    return list(by_name.values()), warnings


def _recency(record: RunRecord) -> tuple[bool, str]:
    return (record.status == "completed", record.finished_at)


def _noise_floor(records: list[RunRecord], given: dict[str, float] | None) -> dict[str, float]:
    """Largest spread any record reports per task, overridden by the argument."""
    spread: dict[str, float] = {}
    for record in records:
        found = record.config.get("noise_floor")
        if not isinstance(found, dict):
            continue
        for task, value in found.items():
            number = isinstance(value, Real) and not isinstance(value, bool)
            if not number or not math.isfinite(value) or value < 0:
                raise ConfigError(
                    f"record {record.name}", field=f"config.noise_floor.{task}",
                    problem=f"a noise floor is a non-negative number, got {value!r}",
                )  # fmt: skip
            spread[task] = max(spread.get(task, 0.0), float(value))
    return {**spread, **(given or {})}


def _baseline_diffs(record: RunRecord, baseline: RunRecord | None, policy: PolicyConfig) -> dict:
    """Per task, this variant against its own model's baseline precision on the same items."""
    if baseline is None:
        return {}
    diffs = {}
    for task, result in record.tasks.items():
        if task in baseline.tasks:
            diff = paired_diff(result, baseline.tasks[task], policy.confidence, DEFAULT_RESAMPLES, DEFAULT_SEED)
            if diff is not None:
                diffs[task] = diff
    return diffs


def _verdicts(
    records: list[RunRecord], evidence: dict[str, Evidence], ranking: Ranking, policy: PolicyConfig
) -> list[Verdict]:
    winner = ranking.winner
    verdicts = []
    for record in records:
        name = record.name
        if record.status != "completed":
            reason = record.reason or (record.error.message if record.error else "") or record.status
            verdicts.append(Verdict(variant=name, status=record.status, reasons=[reason]))
            continue
        objective = ranking.objectives[name]
        ev = evidence[name]
        scores = {k: v for k, v in (("mean", ev.mean_score), ("weighted", ev.weighted_score)) if v is not None}
        baseline = pick_baseline(record, records)
        common = {"variant": name, "checks": ranking.checks[name], "objective": objective,
                  "paired": ev.paired, "scores": scores, "baseline": baseline.name if baseline else None,
                  "baseline_paired": _baseline_diffs(record, baseline, policy),
                  "intervals": {t: TaskInterval(low=i.low, high=i.high, method=i.method)
                                for t, i in ev.intervals.items()}}  # fmt: skip
        if name not in ranking.ranked:
            reasons = rejection_reasons(name, ranking, policy)
            verdicts.append(Verdict(status="rejected", reasons=reasons, **common))
            continue
        position = ranking.ranked.index(name) + 1
        if name == winner:
            verdicts.append(Verdict(status="winner", rank=position, **common))
            continue
        assert winner is not None and objective is not None  # name is ranked, so both exist
        mine = format_objective(policy.objective, objective)
        best = format_objective(policy.objective, ranking.objectives[winner])  # type: ignore[arg-type]
        reason = f"ranked {position}: {mine} against {best} for {winner}"
        verdicts.append(Verdict(status="eligible", reasons=[reason], rank=position, **common))

    def order(v: Verdict) -> tuple[int, float, float, str]:
        objective = v.objective if v.objective is not None else math.inf
        return (_STATUS_ORDER[v.status], v.rank or 0, objective, v.variant)

    return sorted(verdicts, key=order)


def _pareto(evidence: dict[str, Evidence]) -> dict[str, list[str]]:
    """Accuracy (weighted when weights are set) against weight memory and against latency."""
    fronts = {}
    for axis, measure in (("weight_memory", weight_gb), ("latency", e2e_p50_ms)):
        points = {
            name: (ev.score, cost) for name, ev in evidence.items()
            if ev.score is not None and (cost := measure(ev.record)) is not None
        }  # fmt: skip
        fronts[axis] = pareto_front(points)  # type: ignore[arg-type]
    return fronts
