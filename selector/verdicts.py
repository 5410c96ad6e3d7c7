"""Selection's output: a verdict per variant and the recommendation, a pure function of RunRecords
and the policy (selector/selection), rendered by selector/report and stored as report.json.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from selector.records import StrictModel

VerdictStatus = Literal["winner", "eligible", "rejected", "stopped", "failed", "skipped", "not_needed"]


class Check(StrictModel):
    """One constraint applied to one variant: an accuracy floor, a memory budget, a latency limit."""

    name: str  # e.g. "accuracy:arithmetic", "max_weight_gb", "latency:e2e_ms_p95@8"
    value: float | None  # what the variant measured (None: metric missing)
    limit: float
    passed: bool
    rule: str = "point"  # point | lower_bound | non_inferiority | max
    detail: str = ""  # one line for a person: "0.45 < floor 0.60 (15.0 points short)"


class PairedDiff(StrictModel):
    """A variant minus the reference on the same items of one task (selector.stats_paired)."""

    task: str
    diff: float
    ci_low: float
    ci_high: float
    n: int
    flips_to_wrong: int  # reference right, variant wrong (fractional scores: at the 0.5 cut, for people)
    flips_to_right: int  # reference wrong, variant right
    mcnemar_p: float | None = None  # 0/1 scores only
    method: str = "bootstrap"  # the interval: tango (0/1 scores) | betting (fractional) | bootstrap (older records)
    test: str = "mcnemar"  # the p-value's test: mcnemar (0/1) | wilcoxon (fractional, raw scores)
    p_value: float | None = None  # that test's two-sided p (None in older records: mcnemar_p)

    @property
    def p(self) -> float | None:
        return self.p_value if self.p_value is not None else self.mcnemar_p


class TaskInterval(StrictModel):
    """The one interval of a task's mean that the decision used (selector.stats.mean_interval)."""

    low: float
    high: float
    method: str  # wilson | bootstrap | stored


class Verdict(StrictModel):
    variant: str
    status: VerdictStatus
    reasons: list[str] = Field(default_factory=list)  # why not the winner, one line each
    checks: list[Check] = Field(default_factory=list)
    objective: float | None = None  # the value ranked on (e.g. weight GB); lower is better
    rank: int | None = None  # 1 = best among eligible
    scores: dict[str, float] = Field(default_factory=dict)  # "mean" and, with policy.weights, "weighted"
    paired: dict[str, PairedDiff] = Field(default_factory=dict)  # task -> diff vs reference
    # The same model at its baseline precision (bf16 by default): which answers quantization flipped.
    baseline: str | None = None
    baseline_paired: dict[str, PairedDiff] = Field(default_factory=dict)
    intervals: dict[str, TaskInterval] = Field(default_factory=dict)  # task -> the decision's interval


class SettingResult(StrictModel):
    """One serving setting of a model x precision, as the knob comparison reads it."""

    variant: str
    setting: dict[str, Any] = Field(default_factory=dict)
    level: str = ""  # the load level compared at (the heaviest all settings ran), "concurrency 8"
    goodput_rps: float | None = None  # requests/s within measure.load.slo there (without one: all successful)
    e2e_p95_ms: float | None = None  # at that level
    meets: bool = True  # passes every policy.latency_limits key
    detail: str = ""  # the limits it misses, in one line


class SettingChoice(StrictModel):
    """The settings of one model x precision side by side (selection.settings), best first."""

    group: str  # model/precision
    basis: str  # goodput | throughput (no SLO was set)
    best: str | None  # the variant that meets the latency limits at the highest goodput
    summary: str
    results: list[SettingResult] = Field(default_factory=list)


class Selection(StrictModel):
    policy: dict[str, Any]
    winner: str | None
    reference: str | None  # largest size at highest precision present
    summary: str  # the recommendation in one sentence, with its evidence
    verdicts: list[Verdict]
    pareto: dict[str, list[str]] = Field(default_factory=dict)  # axis -> variants on the front
    sensitivity: list[dict[str, Any]] = Field(default_factory=list)
    sample_size: list[dict[str, Any]] = Field(default_factory=list)
    noise_floor: dict[str, float] = Field(default_factory=dict)  # task -> score spread at no change
    warnings: list[str] = Field(default_factory=list)
    settings: list[SettingChoice] = Field(default_factory=list)  # serving settings compared, per model x precision
    # What the rule can tell apart at these sizes (selection.power): per task, the chance a variant a
    # margin below its floor passes, the true accuracy needed to pass, the detectable margin
    power: list[dict[str, Any]] = Field(default_factory=list)
    power_note: str = ""  # the sentence shown next to the verdict
