"""Leaf data types: the RunRecord and what it is made of.

The RunRecord is the contract between the expensive half of a sweep (load, quantize, evaluate,
measure) and the cheap half (selection, report): everything right of it can be re-run from stored
records without touching a model. It is plain JSON on disk and in MLflow.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1

Status = Literal["completed", "failed", "skipped"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())


class Variant(_Model):
    """One point of the grid: a model source at a precision."""

    model: str  # model config name, e.g. "smollm2-135m"
    precision: str  # precision config name, e.g. "int8"
    family: str = ""  # models of one family share a tokenizer and are compared as a size ladder
    params: int = 0  # parameter count of the base model (0 when unknown before loading)

    @property
    def name(self) -> str:
        return f"{self.model}/{self.precision}"


class SampleRecord(_Model):
    """One scored eval item: what the model saw, said, and how it scored."""

    task: str
    id: str
    prompt: str
    output: str
    target: str
    score: float
    extra: dict[str, Any] = Field(default_factory=dict)


class TaskResult(_Model):
    task: str
    metric: str
    value: float
    ci_low: float
    ci_high: float
    n: int
    higher_is_better: bool = True
    ci_method: str = "wilson"
    # Per-item scores keyed by item id: paired statistics between variants need them.
    item_scores: dict[str, float] = Field(default_factory=dict)


class Percentiles(_Model):
    """Milliseconds unless the field name says otherwise."""

    p50: float
    p90: float
    p95: float
    p99: float
    mean: float
    n: int


class LatencyResult(_Model):
    """Single-request latency after warm-up (batch 1)."""

    ttft_ms: Percentiles
    tpot_ms: Percentiles  # per output token after the first
    e2e_ms: Percentiles
    prompt_tokens: int
    output_tokens: int
    repeats: int


class ThroughputPoint(_Model):
    batch_size: int
    output_tokens_per_s: float
    requests_per_s: float
    wall_s: float


class LoadLevel(_Model):
    """One level of a load test: a concurrency or an arrival rate."""

    concurrency: int | None = None
    rate_rps: float | None = None
    requests: int
    errors: int
    duration_s: float
    request_throughput: float
    output_tokens_per_s: float
    ttft_ms: Percentiles | None = None
    itl_ms: Percentiles | None = None
    e2e_ms: Percentiles | None = None
    queue_ms: Percentiles | None = None
    batch_wait_ms: Percentiles | None = None
    compute_ms: Percentiles | None = None
    goodput_rps: float | None = None
    cpu_util_pct: float | None = None  # of what is measured: the worker, or the server's process tree
    harness_cpu_pct: float | None = None  # of the load generator itself (it must stay small)
    gpu_util_pct: float | None = None
    gpu_mem_bytes: int | None = None


class PerfResult(_Model):
    device: str
    latency: LatencyResult | None = None
    throughput: list[ThroughputPoint] = Field(default_factory=list)
    load: list[LoadLevel] = Field(default_factory=list)


class MemoryResult(_Model):
    weight_bytes: int  # parameters + buffers as held in memory
    peak_rss_bytes: int | None = None  # whole process, CPU
    cuda_max_allocated_bytes: int | None = None
    cuda_max_reserved_bytes: int | None = None
    artifact_bytes: int | None = None  # on-disk size of the checkpoint that was loaded


class QuantInfo(_Model):
    method: str
    library: str
    library_version: str
    params: dict[str, Any] = Field(default_factory=dict)
    cached: bool = False
    quantize_s: float | None = None
    artifact_dir: str | None = None
    artifact_bytes: int | None = None
    calibration: dict[str, Any] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)  # what loading changed or could not do, for a person


class FidelityResult(_Model):
    """What quantization changed, against the baseline precision of the same model."""

    baseline: str  # variant name of the baseline
    mean_kl: float
    top1_agreement: float
    positions: int


class ErrorInfo(_Model):
    type: str
    message: str
    stage: str
    log_tail: str = ""


class RunRecord(_Model):
    schema_version: int = SCHEMA_VERSION
    key: str  # stable hash of everything that affects the result
    variant: Variant
    status: Status
    reason: str = ""  # why skipped or failed, in one line
    error: ErrorInfo | None = None
    tasks: dict[str, TaskResult] = Field(default_factory=dict)
    perf: PerfResult | None = None
    memory: MemoryResult | None = None
    quant: QuantInfo | None = None
    fidelity: FidelityResult | None = None
    timings_s: dict[str, float] = Field(default_factory=dict)
    environment: dict[str, Any] = Field(default_factory=dict)
    config: dict[str, Any] = Field(default_factory=dict)
    mlflow_run_id: str | None = None
    started_at: str = ""
    finished_at: str = ""

    @property
    def name(self) -> str:
        return self.variant.name

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(self.model_dump_json(indent=2))
        tmp.replace(path)  # atomic: a reader never sees half a record
        return path

    @classmethod
    def load(cls, path: str | Path) -> RunRecord:
        return cls.model_validate(json.loads(Path(path).read_text()))


# ---- selection output (pure function of RunRecords + policy; rendered by report/) ----

VerdictStatus = Literal["winner", "eligible", "rejected", "failed", "skipped"]


class Check(_Model):
    """One constraint applied to one variant: an accuracy floor, a memory budget, a latency limit."""

    name: str  # e.g. "accuracy:arithmetic", "max_weight_gb", "latency:e2e_ms_p95@8"
    value: float | None  # what the variant measured (None: metric missing)
    limit: float
    passed: bool
    rule: str = "point"  # point | lower_bound | non_inferiority | max
    detail: str = ""  # one line for a person: "0.45 < floor 0.60 (15.0 points short)"


class PairedDiff(_Model):
    """A variant minus the reference on the same items of one task."""

    task: str
    diff: float
    ci_low: float
    ci_high: float
    n: int
    flips_to_wrong: int  # reference right, variant wrong
    flips_to_right: int  # reference wrong, variant right
    mcnemar_p: float


class Verdict(_Model):
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


class Selection(_Model):
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
