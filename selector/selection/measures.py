"""Read the numbers selection needs off a RunRecord: memory, latency, throughput, accuracy.

Each reader returns None when the record did not measure the thing, so a constraint on it can fail
with "not measured" instead of guessing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from selector.errors import ConfigError
from selector.records import LoadLevel, Percentiles, RunRecord

GB = 1e9  # decimal gigabytes, as disk and GPU vendors count them

_SINGLE_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms")  # LatencyResult, batch 1
_LOAD_METRICS = ("ttft_ms", "itl_ms", "e2e_ms", "queue_ms", "batch_wait_ms", "compute_ms")
_STATS = ("p50", "p90", "p95", "p99", "mean")
_LATENCY_KEY = re.compile(
    r"^(?P<metric>[a-z0-9_]+_ms)_(?P<stat>p\d+|mean)(?:@(?P<level>\d+(?:\.\d+)?)(?P<rps>rps)?)?$"
)


@dataclass(frozen=True)
class LatencyKey:
    """A parsed latency limit key: "e2e_ms_p95@8" (load level at concurrency 8), "ttft_ms_p50"
    (single request), "e2e_ms_p99@2.5rps" (load level at an arrival rate of 2.5 requests/s)."""

    metric: str
    stat: str
    concurrency: int | None = None
    rate_rps: float | None = None


def parse_latency_key(key: str) -> LatencyKey:
    match = _LATENCY_KEY.match(key)
    if not match:
        raise ConfigError(
            "policy", field=f"latency_limits.{key}",
            problem="expected <metric>_<stat>[@<concurrency>|@<rate>rps], e.g. e2e_ms_p95@8 or ttft_ms_p50",
        )  # fmt: skip
    metric, stat, level = match["metric"], match["stat"], match["level"]
    allowed = _SINGLE_METRICS if level is None else _LOAD_METRICS
    if metric not in allowed:
        where = "single-request latency" if level is None else "a load level"
        raise ConfigError(
            "policy", field=f"latency_limits.{key}",
            problem=f"unknown metric {metric!r} for {where}; known: {', '.join(allowed)}",
        )  # fmt: skip
    if stat not in _STATS:
        raise ConfigError(
            "policy", field=f"latency_limits.{key}",
            problem=f"unknown statistic {stat!r}; known: {', '.join(_STATS)}",
        )  # fmt: skip
    if level is None:
        return LatencyKey(metric, stat)
    if match["rps"]:
        return LatencyKey(metric, stat, rate_rps=float(level))
    if "." in level:
        raise ConfigError(
            "policy", field=f"latency_limits.{key}",
            problem="a concurrency is a whole number; write @<rate>rps for an arrival rate",
        )  # fmt: skip
    return LatencyKey(metric, stat, concurrency=int(level))


def latency_value(record: RunRecord, key: LatencyKey) -> float | None:
    perf = record.perf
    if perf is None:
        return None
    if key.concurrency is None and key.rate_rps is None:
        dist = getattr(perf.latency, key.metric, None) if perf.latency is not None else None
        return _stat(dist, key.stat)
    level = _find_level(perf.load, key)
    return _stat(getattr(level, key.metric, None), key.stat) if level is not None else None


def _find_level(levels: list[LoadLevel], key: LatencyKey) -> LoadLevel | None:
    for level in levels:
        if key.concurrency is not None and level.concurrency == key.concurrency:
            return level
        if key.rate_rps is not None and level.rate_rps is not None:
            if abs(level.rate_rps - key.rate_rps) <= 1e-9 * max(1.0, key.rate_rps):
                return level
    return None


def _stat(dist: Percentiles | None, stat: str) -> float | None:
    if not isinstance(dist, Percentiles):
        return None
    value = getattr(dist, stat, None)
    return float(value) if value is not None else None


def weight_gb(record: RunRecord) -> float | None:
    return record.memory.weight_bytes / GB if record.memory is not None else None


SERVING_GPU = "serving peak (GPU reserved)"
SERVING_RSS = "serving peak (RSS)"
PROCESS_PEAK = "process peak (older record: preparation and baseline included)"


def serving_peak(record: RunRecord) -> tuple[int | None, str]:
    """The memory serving the variant needs, and what the figure is (docs/memory.md): on a GPU the
    serving phase's reserved VRAM, on CPU its peak resident set. A record made before phases were
    measured apart has only its worker's whole peak (converting, quantizing and the fidelity
    baseline included): that figure, labelled as such."""
    memory = record.memory
    if memory is None:
        return None, ""
    if memory.serving is not None:
        if memory.serving.cuda_reserved_bytes is not None:
            return memory.serving.cuda_reserved_bytes, SERVING_GPU
        if memory.serving.rss_bytes is not None:
            return memory.serving.rss_bytes, SERVING_RSS
    peak = memory.cuda_max_reserved_bytes if memory.cuda_max_reserved_bytes is not None else memory.peak_rss_bytes
    return (peak, PROCESS_PEAK) if peak is not None else (None, "")


def peak_memory_gb(record: RunRecord) -> float | None:
    """The serving peak in GB (what policy.max_memory_gb judges)."""
    peak, _ = serving_peak(record)
    return peak / GB if peak is not None else None


def e2e_p50_ms(record: RunRecord) -> float | None:
    return latency_value(record, LatencyKey("e2e_ms", "p50"))


def best_throughput(record: RunRecord) -> float | None:
    """Highest output tokens/s measured anywhere: batch throughput points and load levels."""
    if record.perf is None:
        return None
    rates = [p.output_tokens_per_s for p in record.perf.throughput]
    rates += [lv.output_tokens_per_s for lv in record.perf.load]
    rates = [r for r in rates if r > 0]
    return max(rates) if rates else None


def cost_per_million_tokens(record: RunRecord, price_per_hour: float) -> float | None:
    """USD per million output tokens at the best measured throughput."""
    tps = best_throughput(record)
    return price_per_hour / (3600.0 * tps) * 1e6 if tps else None
