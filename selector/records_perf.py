"""A record's performance figures (RunRecord.perf): latency at rest, throughput, load levels and
the capacity at the SLO with the probes that found it."""

from __future__ import annotations

from pydantic import Field

from selector.records_answers import LoadAnswers
from selector.records_strict import StrictModel


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
