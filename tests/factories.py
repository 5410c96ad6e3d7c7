"""Builders for the records and configs tests hand to the code under test.

Plain functions rather than fixtures: hypothesis strategies, module-level ladders and the sample
report call them outside any test. Numbers here are made up; a builder only fills in what a test
does not care about, so every value a test asserts on is one it passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from selector.config import CONF_DIR, ModelConfig, PrecisionConfig, SelectorConfig
from selector.records import (
    LatencyResult, LoadLevel, MemoryResult, Percentiles, PerfResult, RunRecord, TaskResult, ThroughputPoint, Variant,
)

GB = 10**9
T = TypeVar("T")


# ---- records ------------------------------------------------------------------------------


def pct(p50: float, *, p90: float = 1.3, p95: float = 1.5, p99: float = 2.0, mean: float = 1.1,
        n: int = 20) -> Percentiles:
    """A distribution given as p50 and multiples of it; by default p95 = 1.5 x p50, p99 = 2 x p50."""
    return Percentiles(p50=p50, p90=p90 * p50, p95=p95 * p50, p99=p99 * p50, mean=mean * p50, n=n)


def latency(e2e_ms: float, *, ttft_ms: float | None = None, tpot_ms: float | None = None) -> LatencyResult:
    """Single-request latency; time to first token and per output token default to e2e/4 and e2e/40."""
    return LatencyResult(ttft_ms=pct(e2e_ms / 4 if ttft_ms is None else ttft_ms),
                         tpot_ms=pct(e2e_ms / 40 if tpot_ms is None else tpot_ms), e2e_ms=pct(e2e_ms),
                         prompt_tokens=64, output_tokens=32, repeats=10)


def perf(device: str = "cpu", *, e2e_ms: float | None = None, ttft_ms: float | None = None,
         tpot_ms: float | None = None, load: Mapping[int, float] | None = None,
         throughput: Sequence[float] = ()) -> PerfResult:
    """load: concurrency -> e2e p50 of that level; throughput: output tokens/s of batch-8 points."""
    levels = [LoadLevel(concurrency=c, requests=32, errors=0, duration_s=10.0, request_throughput=3.2,
                        output_tokens_per_s=100.0 * c, e2e_ms=pct(ms)) for c, ms in (load or {}).items()]
    points = [ThroughputPoint(batch_size=8, output_tokens_per_s=t, requests_per_s=1.0, wall_s=1.0) for t in throughput]
    single = None if e2e_ms is None else latency(e2e_ms, ttft_ms=ttft_ms, tpot_ms=tpot_ms)
    return PerfResult(device=device, latency=single, throughput=points, load=levels)


def hits(right: int, n: int, offset: int = 0) -> list[float]:
    """n item scores of which items offset .. offset+right-1 are right (so variants can nest or not)."""
    return [1.0 if offset <= i < offset + right else 0.0 for i in range(n)]


def task_result(name: str, scores: Sequence[float] | Mapping[str, float] = (), *, value: float | None = None,
                n: int | None = None, ci: tuple[float, float] = (0.0, 1.0), ids: bool = True,
                metric: str = "accuracy", **fields: Any) -> TaskResult:
    """A task's result from its item scores (ids `name-i` for a list), or from a bare value and n.

    The stored interval claims nothing unless `ci` is given: selection recomputes its own."""
    items = dict(scores) if isinstance(scores, Mapping) else {f"{name}-{i}": float(s) for i, s in enumerate(scores)}
    if items:
        value, n = sum(items.values()) / len(items), len(items)
    if value is None or n is None:
        raise ValueError("task_result needs item scores, or a value and n")
    return TaskResult(task=name, metric=metric, value=value, ci_low=ci[0], ci_high=ci[1], n=n,
                      item_scores=items if ids else {}, **fields)


def load_answers(tasks: Mapping[str, tuple[Mapping[str, float], Mapping[str, float]]], *, metric: str = "numeric",
                 binary: bool = True, failed: int = 0, examples: Sequence[Any] = (), note: str = "") -> Any:
    """A level's LoadAnswers from, per task, (each item's mean score under load, its score at rest):
    one request per item, an answer counted as changed where its score moved; the statistics as
    selector.measure.answers computes them."""
    from selector.measure.answers import _level_p, fill_statistics
    from selector.records_answers import LoadAnswers, TaskAnswers

    out = LoadAnswers(requests=failed + sum(len(load) for load, _ in tasks.values()), failed=failed,
                      examples=list(examples), note=note)
    for name, (load, rest) in tasks.items():
        moved = sum(load[i] != rest[i] for i in load)
        t = TaskAnswers(metric=metric, requests=len(load), compared=len(load), changed=moved)
        fill_statistics(t, {i: [v] for i, v in load.items()}, dict(rest), binary, 0.95, "exact")
        out.tasks[name] = t
    out.compared, out.changed = sum(t.compared for t in out.tasks.values()), sum(t.changed for t in out.tasks.values())
    out.p_value = _level_p([t.p_value for t in out.tasks.values() if t.p_value is not None])
    return out


def run_record(model: str, precision: str, tasks: Iterable[TaskResult] = (), *, params: int = 0, family: str = "",
               status: str = "completed", reason: str = "", weight_bytes: int | None = None,
               key: str | None = None, **fields: Any) -> RunRecord:
    """The RunRecord of `model/precision`. A variant that did not complete keeps no tasks, perf or memory."""
    done = status == "completed"
    memory = fields.pop("memory", None)
    if memory is None and weight_bytes is not None:
        memory = MemoryResult(weight_bytes=weight_bytes)
    perf_result = fields.pop("perf", None)
    return RunRecord(key=key or f"{model}-{precision}",
                     variant=Variant(model=model, precision=precision, family=family, params=params),
                     status=status, reason=reason,  # type: ignore[arg-type]
                     tasks={t.task: t for t in tasks} if done else {},
                     memory=memory if done else None, perf=perf_result if done else None, **fields)


# ---- configs ------------------------------------------------------------------------------


def shipped_config(group: str, name: str, schema: type[T]) -> T:
    """conf/<group>/<name>.yaml read into its schema, as Hydra composes it."""
    from omegaconf import OmegaConf

    merged = OmegaConf.merge(OmegaConf.structured(schema), OmegaConf.load(CONF_DIR / group / f"{name}.yaml"))
    cfg = OmegaConf.to_object(merged)
    assert isinstance(cfg, schema)
    return cfg


def shipped_precision(name: str, **params: Any) -> PrecisionConfig:
    """A shipped precision, with `params` laid over its own (group size, kernels, ...)."""
    cfg = shipped_config("precision", name, PrecisionConfig)
    cfg.params.update(params)
    return cfg


def selector_config(cache_dir: str | Path, model: ModelConfig | str = "tiny",
                    precision: PrecisionConfig | str = "bf16", **fields: Any) -> SelectorConfig:
    """One variant's config; a model given by name is a bare ModelConfig, a precision by name the shipped one."""
    from selector.engines.inprocess.engine import HfEngineConfig

    fields.setdefault("engine", HfEngineConfig())
    return SelectorConfig(model=ModelConfig(name=model) if isinstance(model, str) else model,
                          precision=shipped_precision(precision) if isinstance(precision, str) else precision,
                          cache_dir=str(cache_dir), **fields)


def inprocess(model: Any, tokenizer: Any, **config: Any) -> Any:
    """The in-process engine (selector.engines.inprocess.engine) around a model the test loaded itself."""
    from selector.engines.inprocess.engine import HfEngineConfig, InProcessRunning
    from selector.precisions.loading import LoadedModel

    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return InProcessRunning(HfEngineConfig(**config), LoadedModel(model, tokenizer, "cpu"))
