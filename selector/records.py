"""Leaf data types: the RunRecord and what it is made of.

The RunRecord is the contract between the expensive half of a sweep (load, quantize, evaluate,
measure) and the cheap half (selection, report): everything right of it can be re-run from stored
records without touching a model. It is plain JSON on disk and in MLflow.

Here: the record itself, its variant, its scores and how the search saw it. Its parts live in a
module each, on records_strict's StrictModel: records_perf, records_memory, records_quant,
records_serving (their types importable from here too) and records_answers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from selector.records_memory import MemoryResult, PeakMemory
from selector.records_perf import (
    CapacityConfirmation,
    CapacityResult,
    CapacityStep,
    LatencyResult,
    LoadLevel,
    PerfResult,
    Percentiles,
    ThroughputPoint,
)
from selector.records_quant import FidelityResult, KernelInfo, QuantInfo
from selector.records_serving import EngineAgreement, ServingInfo
from selector.records_strict import StrictModel

# Kept importable from here: most of selector imports its record types from this module.
__all__ = [
    "SCHEMA_VERSION", "Status", "Preparation", "StrictModel", "Variant", "setting_label", "SampleRecord",
    "TaskResult", "Percentiles", "LatencyResult", "ThroughputPoint", "LoadLevel", "CapacityStep",
    "CapacityConfirmation", "CapacityResult", "PerfResult", "PeakMemory", "MemoryResult", "KernelInfo",
    "ServingInfo", "EngineAgreement", "QuantInfo", "FidelityResult", "ErrorInfo", "SearchInfo", "RunRecord",
]

SCHEMA_VERSION = 1

# stopped: an adaptive search stopped it early, a floor out of reach; not_needed: the search did not
# measure it (a smaller variant already met every floor).
Status = Literal["completed", "stopped", "failed", "skipped", "not_needed"]
# Where a variant's checkpoint came from, in the run that measured it (RunRecord.preparation):
# built: its preparation process ran then (converting, quantizing or the fidelity reference);
# cache: everything it loaded was in the cache already; none: nothing was prepared or loaded for it
# (not needed, skipped, stopped on items scored before, an engine that loads no checkpoint of ours);
# "": a record from before this was kept (RunRecord.prepared infers what it can).
Preparation = Literal["built", "cache", "none", ""]


class Variant(StrictModel):
    """One point of the grid: a model source at a precision, at a serving setting when a sweep
    varies serving knobs (settings of one model x precision share its scored items)."""

    model: str  # model config name, e.g. "smollm2-135m"
    precision: str  # precision config name, e.g. "int8"
    family: str = ""  # models of one family share a tokenizer and are compared as a size ladder
    params: int = 0  # parameter count of the base model (0 when unknown before loading)
    # The serving knobs this sweep varies, short name -> value ({"max_batch_size": 8}); empty
    # when it varies none, so names stay "model/precision".
    setting: dict[str, Any] = Field(default_factory=dict)

    @property
    def base_name(self) -> str:
        """model/precision, whatever the setting."""
        return f"{self.model}/{self.precision}"

    @property
    def name(self) -> str:
        """"model/precision", or "model/precision [max_batch_size=8]" at a swept setting."""
        return f"{self.base_name} [{setting_label(self.setting)}]" if self.setting else self.base_name


def setting_label(setting: dict[str, Any]) -> str:
    """"max_batch_size=8, max_queue_delay_ms=10": knobs in the order given, numbers without a
    trailing ".0"."""
    return ", ".join(f"{k}={_plain(v)}" for k, v in setting.items())


def _plain(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


class SampleRecord(StrictModel):
    """One scored eval item: what the model saw, said, and how it scored."""

    task: str
    id: str
    prompt: str
    output: str
    target: str
    score: float
    extra: dict[str, Any] = Field(default_factory=dict)


class TaskResult(StrictModel):
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


class ErrorInfo(StrictModel):
    type: str
    message: str
    stage: str
    log_tail: str = ""


class SearchInfo(StrictModel):
    """How much of the eval set a variant saw, and why it stopped when it did not see it all."""

    strategy: str = "grid"  # adaptive | grid
    items_evaluated: int = 0
    items_total: int = 0
    items_reused: int = 0  # scored by an earlier run with the same evaluation key, not again
    stopped_by: str = ""  # the decision, in one line, when a floor was found out of reach
    task: str = ""  # the task whose floor stopped it
    bound: float | None = None  # the anytime bound on that task's full-set score
    level: float | None = None  # its simultaneous confidence (1.0: certain)
    floor: float | None = None  # the floor it was tested against (None: a non-inferiority margin)
    order_seed: int | None = None  # the seed of the item order it was scored in (selector.sweep.order_seed)


class RunRecord(StrictModel):
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
    kernel: KernelInfo | None = None
    fidelity: FidelityResult | None = None
    serving: ServingInfo | None = None
    # engine=vllm with engine.compare_in_process: per task, served answers against in-process ones
    agreement: dict[str, EngineAgreement] = Field(default_factory=dict)
    search: SearchInfo | None = None
    preparation: Preparation = ""  # built | cache | none (see Preparation above)
    timings_s: dict[str, float] = Field(default_factory=dict)
    environment: dict[str, Any] = Field(default_factory=dict)
    config: dict[str, Any] = Field(default_factory=dict)
    mlflow_run_id: str | None = None
    started_at: str = ""
    finished_at: str = ""

    @property
    def name(self) -> str:
        return self.variant.name

    @property
    def prepared(self) -> Preparation:
        """How its checkpoint came to be (Preparation). A record from before `preparation` was kept:
        what it holds tells, where it tells anything ("" where it does not): the lines its
        preparation process wrote (built), a status that never loads (none), the preparation peak
        (built), a load peak without one (cache: the load phase was measured, so was preparation)."""
        if self.preparation:
            return self.preparation
        mem = self.memory
        if self.config.get("prepared") or (mem is not None and mem.prepare is not None):
            return "built"
        if self.status in ("not_needed", "skipped"):
            return "none"
        return "cache" if mem is not None and mem.load is not None else ""

    @property
    def quant_from_cache(self) -> bool:
        """Its quantized artifact was read from the cache, made by an earlier run (quant.quantize_s is
        what it took then). Older records said cached even when their own preparation process had
        just quantized it (the engine then found it in the cache): that process's line tells."""
        if self.quant is None or not self.quant.cached:
            return False
        return not any(str(line).startswith("artifact ") and str(line).endswith(" (quantized)")
                       for line in self.config.get("prepared") or [])

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
