"""Per-variant evidence that does not depend on floors: intervals at the policy's confidence,
paired differences to the reference, and summary scores. Computed once per selection, so the
sensitivity analysis can re-apply floors cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from selector.config import PolicyConfig
from selector.stats import clopper_pearson_interval, mean_interval, newcombe_diff_interval, wilson_interval
from selector.stats_paired import paired_binary, paired_fractional
from selector.records import RunRecord, TaskResult
from selector.verdicts import PairedDiff

RIGHT_THRESHOLD = 0.5  # a fractional score counts as "right" in the flip counts (for people; no test uses it)


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    method: str  # what produced it: exact | wilson | bootstrap | stored


@dataclass(frozen=True)
class UnpairedDiff:
    """Variant minus reference when the two share no item ids (Newcombe interval)."""

    task: str
    diff: float
    ci_low: float
    ci_high: float


@dataclass
class Evidence:
    record: RunRecord
    intervals: dict[str, Interval] = field(default_factory=dict)
    paired: dict[str, PairedDiff] = field(default_factory=dict)
    unpaired: dict[str, UnpairedDiff] = field(default_factory=dict)
    mean_score: float | None = None  # mean over higher-is-better tasks
    weighted_score: float | None = None  # with policy.weights; None when no weights are set

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def score(self) -> float | None:
        """The accuracy used for ranking ties and Pareto fronts."""
        return self.weighted_score if self.weighted_score is not None else self.mean_score


def is_binary(result: TaskResult) -> bool:
    """0/1 scores: what the metric declares; for a metric this install does not know (an imported
    record), whether every stored item score is 0 or 1 (without item scores: a stored Wilson)."""
    from selector.registry import UnknownNameError
    from selector.tasks.metrics import METRICS

    try:
        return bool(METRICS.get(result.metric).binary)
    except UnknownNameError:
        if result.item_scores:
            return all(s in (0.0, 1.0) for s in result.item_scores.values())
        return result.ci_method in ("wilson", "exact")


def task_interval(
    result: TaskResult, confidence: float, method: str, n_resamples: int, seed: int
) -> Interval:
    """The task's interval at the policy's confidence, recomputed so every variant is judged alike,
    by the one rule the evaluation and the report use too (selector.stats.mean_interval). Without
    per-item scores it is rebuilt from the mean and n where the method allows it (exact and Wilson
    read only the sum; the bootstrap falls back to Wilson for a 0/1 metric, and the selection warns),
    else the interval stored in the TaskResult is kept."""
    binary = is_binary(result)
    if result.item_scores:
        low, high, used = mean_interval(list(result.item_scores.values()), binary, confidence, method,
                                        n_resamples, seed)  # fmt: skip
        return Interval(low, high, used)
    if result.n > 0 and 0.0 <= result.value <= 1.0 and (binary or method != "bootstrap"):
        interval = clopper_pearson_interval if method == "exact" else wilson_interval
        low, high = interval(result.value * result.n, result.n, confidence)
        return Interval(low, high, "exact" if method == "exact" else "wilson")
    return Interval(result.ci_low, result.ci_high, "stored")


def paired_diff(
    variant: TaskResult, reference: TaskResult, confidence: float, n_resamples: int, seed: int
) -> PairedDiff | None:
    """Variant minus reference over the item ids both scored; None when they share none.

    0/1 scores: Tango's score interval and McNemar's exact test; fractional scores: a betting
    interval of the mean difference and Wilcoxon's signed-rank test, both on the raw scores
    (selector.stats_paired). n_resamples and seed are kept for callers; no resampling is needed."""
    shared = sorted(variant.item_scores.keys() & reference.item_scores.keys())
    if not shared:
        return None
    v = np.array([variant.item_scores[i] for i in shared], dtype=float)
    r = np.array([reference.item_scores[i] for i in shared], dtype=float)
    binary = is_binary(variant) and is_binary(reference) and bool(np.all(np.isin(v, (0, 1)) & np.isin(r, (0, 1))))
    if binary:
        low, high, to_wrong, to_right, p = paired_binary(v, r, confidence)
        method, test, mcnemar = "tango", "mcnemar", p
    else:
        low, high, p = paired_fractional(v - r, confidence)
        v_right, r_right = v >= RIGHT_THRESHOLD, r >= RIGHT_THRESHOLD
        to_wrong, to_right = int(np.sum(r_right & ~v_right)), int(np.sum(~r_right & v_right))
        method, test, mcnemar = "betting", "wilcoxon", None
    return PairedDiff(
        task=variant.task, diff=float(np.mean(v - r)), ci_low=low, ci_high=high, n=len(shared),
        flips_to_wrong=to_wrong, flips_to_right=to_right, mcnemar_p=mcnemar, method=method, test=test, p_value=p,
    )  # fmt: skip


def unpaired_diff(variant: TaskResult, reference: TaskResult, confidence: float) -> UnpairedDiff:
    low, high = newcombe_diff_interval(
        variant.value, variant.n, reference.value, reference.n, confidence
    )
    return UnpairedDiff(variant.task, variant.value - reference.value, low, high)


def mean_score(record: RunRecord) -> float | None:
    values = [t.value for t in record.tasks.values() if t.higher_is_better]
    return float(np.mean(values)) if values else None


def weighted_score(record: RunRecord, weights: dict[str, float]) -> float | None:
    """Weighted mean of task values; None when no weights are set or a weighted task is missing."""
    used = {task: w for task, w in weights.items() if w > 0}
    if not used or any(task not in record.tasks for task in used):
        return None
    total = sum(used.values())
    return sum(record.tasks[task].value * w for task, w in used.items()) / total


def gather(
    records: list[RunRecord],
    reference: RunRecord | None,
    policy: PolicyConfig,
    n_resamples: int,
    seed: int,
) -> dict[str, Evidence]:
    """Evidence for every completed record, keyed by variant name."""
    out: dict[str, Evidence] = {}
    for record in records:
        if record.status != "completed":
            continue
        ev = Evidence(record, mean_score=mean_score(record))
        ev.weighted_score = weighted_score(record, policy.weights)
        for task, result in record.tasks.items():
            ev.intervals[task] = task_interval(
                result, policy.confidence, policy.ci_method, n_resamples, seed
            )
            if reference is None or record is reference or task not in reference.tasks:
                continue
            ref = reference.tasks[task]
            diff = paired_diff(result, ref, policy.confidence, n_resamples, seed)
            if diff is not None:
                ev.paired[task] = diff
            else:
                ev.unpaired[task] = unpaired_diff(result, ref, policy.confidence)
        out[record.name] = ev
    return out
