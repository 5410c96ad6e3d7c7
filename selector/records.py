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

from selector.records_answers import LoadAnswers

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


class StrictModel(BaseModel):
    """Unknown fields are an error, so a misspelt or stale field never passes silently."""
    model_config = ConfigDict(extra="forbid", protected_namespaces=())


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


class Percentiles(StrictModel):
    """Milliseconds unless the field name says otherwise."""

    p50: float
    p90: float
    p95: float
    p99: float
    mean: float
    n: int


class LatencyResult(StrictModel):
    """Single-request latency after warm-up (batch 1)."""

    ttft_ms: Percentiles
    tpot_ms: Percentiles  # per output token after the first
    e2e_ms: Percentiles
    prompt_tokens: int
    output_tokens: int
    repeats: int


class ThroughputPoint(StrictModel):
    batch_size: int
    output_tokens_per_s: float
    requests_per_s: float
    wall_s: float


class LoadLevel(StrictModel):
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
    # vLLM's own split of compute (its /metrics): prefill (prompt up to the first token) and decode
    prefill_ms: Percentiles | None = None
    decode_ms: Percentiles | None = None
    goodput_rps: float | None = None
    cpu_util_pct: float | None = None  # of what is measured: the worker, or the server's process tree
    harness_cpu_pct: float | None = None  # of the load generator itself (it must stay small)
    gpu_util_pct: float | None = None
    gpu_mem_bytes: int | None = None
    # Where queue/batch-wait/compute came from: "scheduler" (in-process, per request), "vllm" or
    # "tgi" (the server's Prometheus histograms), "" (nothing: split_note says why).
    split_source: str = ""
    split_note: str = ""
    # The slowest requests (e2e at or above the level's p95): the mean ms of their e2e and of each
    # part of it, and how many. Per-request parts add up and percentiles do not, so this is what
    # says what the tail is made of. Empty without a per-request split (a server).
    tail_ms: dict[str, float] = Field(default_factory=dict)
    # A request file's recorded arrival times, replayed stretched by this factor (measure.load.time_scale);
    # None: a concurrency or Poisson level.
    replay_scale: float | None = None
    input_tokens_per_s: float | None = None  # prompt tokens of successful requests / duration (None: not counted)
    # Share of the prompt tokens the server found in its prefix cache during the level (vLLM's
    # prefix_cache_hits / prefix_cache_queries counters, differences of two scrapes); None: no such counters.
    prefix_cache_hit_rate: float | None = None
    # The eval items' answers at this level against the variant's answers at rest (None: the level
    # sent no eval item, e.g. a request file's rows, or a record from before answers were scored)
    answers: LoadAnswers | None = None

    @property
    def running_mean(self) -> float | None:
        """Requests computing at once, on average over the level (Little's law: total compute
        time of its requests over its duration): the batch the server actually ran."""
        if self.compute_ms is None or not self.duration_s:
            return None
        return self.compute_ms.mean * self.compute_ms.n / 1e3 / self.duration_s


class CapacityStep(StrictModel):
    """One probe of the capacity search: an open-loop level at a rate (or a closed-loop level at a
    concurrency), one run of it, and whether it met the SLO."""

    rate_rps: float | None = None  # capacity_on=rate
    concurrency: int | None = None  # capacity_on=concurrency
    repeat: int = 0  # which run (0: the search that located the boundary; 1, 2, ...: its repeats)
    passed: bool
    level: LoadLevel
    # slo key -> {"estimate": the probe's percentile, "limit": ...} (records made before intervals also
    # have "upper", an order-statistic bound); failed requests count as infinitely slow (estimate None:
    # it fell on one, or no request carried the figure)
    checks: dict[str, dict[str, float | None]] = Field(default_factory=dict)
    # log(estimate / limit) of the limit it misses most (<= 0: within the SLO; None: infinite)
    margin: float | None = None
    within_fit: bool | None = None  # every run at this level, combined monotonically: within the SLO
    stopped: str = ""  # why the probe ended early (over-saturated), "" when it ran to its end

    @property
    def at(self) -> float:
        """Its level: the rate, or the concurrency."""
        return float(self.rate_rps if self.rate_rps is not None else self.concurrency or 0)


class CapacityConfirmation(StrictModel):
    """After the search: a run at the rate the plan uses (measure.load.confirm_s long, fresh prompts),
    judged like a probe, on what came after its warm-up. held: it met every percentile limit."""

    rate_rps: float
    window_s: float  # the judged part's length (s), after warmup_s
    warmup_s: float
    held: bool
    margin: float | None = None  # log((estimate + rise) / limit) of the limit it missed most; None: infinite
    checks: dict[str, dict[str, float | None]] = Field(default_factory=dict)  # as CapacityStep.checks
    level: LoadLevel  # the whole run's summary
    judged_requests: int = 0
    stopped: str = ""  # why it ended early (over-saturated), "" when it ran to its end
    note: str = ""  # why it did not hold, in words (the first failed request's error, the log's tail)


class CapacityResult(StrictModel):
    """The highest arrival rate (or concurrency) whose requests met measure.load.slo's percentile
    limits, with its confidence interval from repeated runs (selector.measure.capacity)."""

    slo: dict[str, float]
    confidence: float
    tolerance: float
    requests_per_step: int  # the fewest requests a probe's judged window holds
    # a probe's judged window (s) and the warm-up before it (None: a record from before steady-state probes:
    # each probe was a burst of requests_per_step requests from an idle server)
    probe_s: float | None = None
    warmup_s: float | None = None
    on: str = "rate"  # rate | concurrency
    # rate: the estimate in req/s; concurrency: the req/s served at the capacity concurrency.
    # None: even the lowest level probed broke the SLO
    capacity_rps: float | None = None
    failed_rps: float | None = None  # rate: the lowest rate the combined runs put over the SLO; None: none
    capacity_concurrency: float | None = None  # concurrency: the estimate (a crossing between two whole levels)
    failed_concurrency: int | None = None
    repeats: int = 1  # runs whose crossings make the interval
    low: float | None = None  # the interval, in the search's unit (req/s or concurrency); None: one run
    high: float | None = None
    low_rps: float | None = None  # what to plan on: the req/s the lower bound holds (None: no interval)
    runs: list[float] = Field(default_factory=list)  # each run's crossing of the SLO, in the search's unit
    straddles: list[float] = Field(default_factory=list)  # levels where some runs met the SLO and others broke it
    output_tokens_per_s: float | None = None  # at capacity (or at the lowest rate, when that broke it)
    input_tokens_per_request: float | None = None  # over every successful request of the search
    output_tokens_per_request: float | None = None
    cpu_util_pct: float | None = None
    gpu_util_pct: float | None = None
    steps: list[CapacityStep] = Field(default_factory=list)  # in the order probed
    confirmation: CapacityConfirmation | None = None  # the planned rate, run for measure.load.confirm_s
    wall_s: float = 0.0
    note: str = ""

    @property
    def estimate(self) -> float | None:
        """The capacity in the search's unit."""
        return self.capacity_concurrency if self.on == "concurrency" else self.capacity_rps

    @property
    def planning_rps(self) -> float | None:
        """The req/s a deployer plans on: the lower bound's when there is an interval, else the estimate's."""
        return self.low_rps if self.low_rps is not None else self.capacity_rps


class PerfResult(StrictModel):
    device: str
    latency: LatencyResult | None = None
    throughput: list[ThroughputPoint] = Field(default_factory=list)
    load: list[LoadLevel] = Field(default_factory=list)
    capacity: CapacityResult | None = None  # measure.load.capacity (capacity_on=rate)
    capacity_concurrency: CapacityResult | None = None  # measure.load.capacity_on=concurrency
    # engine=hf: whether latency and throughput ran on the fast path (static KV cache + compiled
    # decode step, engine.compile), the seconds its first call at each shape took (compiling;
    # never inside a latency figure), and why it was off or fell back.
    compiled: bool | None = None
    compile_s: float | None = None
    compile_note: str = ""


class PeakMemory(StrictModel):
    """The most memory one phase of a variant's life held (docs/memory.md)."""

    rss_bytes: int | None = None  # the process's resident set (high-water mark over the phase)
    cuda_allocated_bytes: int | None = None  # torch's peak allocated on the device
    cuda_reserved_bytes: int | None = None  # torch's peak reserved (what the device had to give)


class MemoryResult(StrictModel):
    weight_bytes: int  # parameters + buffers as held in memory
    # The three phases (None in records made before they were measured apart):
    serving: PeakMemory | None = None  # after load: evaluation, latency and load tests
    load: PeakMemory | None = None  # loading the checkpoint as production would (from the cache)
    prepare: PeakMemory | None = None  # converting, quantizing, the fidelity reference (None: all cached)
    runtime_rss_bytes: int | None = None  # the process just before the model loaded (interpreter, libraries)
    # The worker process's whole life (in older records, the only peak there is):
    peak_rss_bytes: int | None = None
    cuda_max_allocated_bytes: int | None = None
    cuda_max_reserved_bytes: int | None = None
    artifact_bytes: int | None = None  # on-disk size of the checkpoint that was loaded
    planned_serving_bytes: int | None = None  # plan's estimate of the serving peak (weights, KV, activations, runtime)
    # A server's (selector/engines/served/footprint.py): `serving` is what the variant needs at the load it
    # was tested under (the footprint with the preallocated KV pool replaced by the part of it in
    # use at the peak); the footprint is what its processes held, pool and all.
    footprint: PeakMemory | None = None
    kv_pool_bytes: int | None = None  # the KV cache the server preallocated (every instance's)
    kv_peak_bytes: int | None = None  # the part of it in use at the peak (the server's own gauge)
    # tensors: counted in memory (in-process); checkpoint: its files at the served dtype; vllm: the
    # server's own figure; plan: plan's estimate (a server whose checkpoint is not on this machine)
    weights_source: str = "tensors"


class KernelInfo(StrictModel):
    """Which code ran the linear layers: a broken or unpacked kernel can look like accuracy loss."""

    backend: str  # the precision backend (native, bnb, torchao, gptqmodel, llmcompressor, ...)
    kernel: str  # short name: dense, marlin, exllama, torch, gptqmodel-auto, bnb-int8, torchao, ...
    requested: str = "auto"  # what the precision's `kernel` param asked for
    linear_class: str  # module path and class of the first quantized linear layer (torch.nn.Linear if none)
    weight_class: str = ""  # tensor subclass holding its weight (torchao), "" for plain tensors
    quantized_layers: int = 0  # linear layers of a quantized kind
    plain_layers: int = 0  # plain torch.nn.Linear layers with dense weights (the LM head not counted)
    library_kernel: str = ""  # the library's own name for it (gptqmodel's backend, e.g. gptq_marlin)
    unpacked: bool = False  # a quantized precision whose linear layers run as plain dense Linear
    dtype: str = ""  # the compute dtype the model was loaded in
    fallbacks: list[str] = Field(default_factory=list)  # kernels passed over, and why


class ServingInfo(StrictModel):
    """A server the harness started for the variant (engine=vllm): what it was and how it ran the
    weights, read from its own log (server.log in the variant's folder). The report labels it as
    the record says (`shown`), never assuming which server it was."""

    engine: str  # vllm
    # What the engine calls itself in the report ("vLLM"), as it said when it wrote the record; ""
    # in records from before: the report shows `engine` then.
    label: str = ""
    version: str = ""
    command: list[str] = Field(default_factory=list)
    start_s: float | None = None  # from launch to answering /health (vLLM's first start compiles)
    quantization: str | None = None  # the method vLLM loaded the checkpoint with (None: not quantized)
    kernels: list[str] = Field(default_factory=list)  # the linear kernels it picked, e.g. CPUWNA16LinearKernel
    schemes: list[str] = Field(default_factory=list)  # the quantization schemes those kernels ran
    packed: bool | None = None  # quantized weights served by a kernel that reads them packed (None: not quantized)
    log: str = "server.log"
    instances: int = 1  # servers on this machine, requests spread over them round-robin
    cores: list[str] = Field(default_factory=list)  # each instance's CPU list (VLLM_CPU_OMP_THREADS_BIND); []: vLLM's own
    logs: list[str] = Field(default_factory=list)  # each instance's log, in the variant's folder
    requests: list[int | None] = Field(default_factory=list)  # each instance's finished requests (its /metrics)

    @property
    def shown(self) -> str:
        """The server's name in the report: its own label, else (an older record) its engine."""
        return self.label or self.engine


class EngineAgreement(StrictModel):
    """One task evaluated both in-process (engine=hf) and through the server on the same checkpoint."""

    n: int  # items scored both ways
    differ: int  # items whose answer (or multiple-choice pick) differs
    in_process_value: float
    served_value: float
    examples: list[dict[str, Any]] = Field(default_factory=list)  # {id, in_process, served}, a few


class QuantInfo(StrictModel):
    method: str
    library: str
    library_version: str
    params: dict[str, Any] = Field(default_factory=dict)
    # True: the artifact was read from the cache, made by an earlier run (quantize_s is what it took
    # then); False: quantized by the run that made this record (its preparation process)
    cached: bool = False
    quantize_s: float | None = None
    artifact_dir: str | None = None
    artifact_bytes: int | None = None
    calibration: dict[str, Any] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)  # what loading changed or could not do, for a person


class FidelityResult(StrictModel):
    """What quantization changed, against the baseline precision of the same model."""

    baseline: str  # variant name of the baseline
    mean_kl: float
    top1_agreement: float
    positions: int
    # full: the variant's whole next-token distribution (in-process); top-N: the N most likely
    # tokens a server returns per position (a coarser, still lower, bound: selector/measure/fidelity.py)
    method: str = "full"
    # top-N only: positions where the server named none of the baseline's top tokens; there mean_kl
    # holds the most a top-N can show, however far the variant moved (0 in records from before)
    disjoint: int = 0


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
