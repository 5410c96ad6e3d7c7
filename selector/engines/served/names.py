"""The names one kind of server gives, in its Prometheus /metrics, to what selector reads there."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerMetricNames:
    server: str  # what the report calls the server whose histograms gave a split
    prefix: str  # every one of its metric names starts so
    queue: tuple[str, ...] = ()  # histograms in seconds: time waiting in its queue
    compute: tuple[str, ...] = ()  # ... computing (prefill + decode)
    prefill: tuple[str, ...] = ()
    decode: tuple[str, ...] = ()
    prefix_cache: tuple[str, ...] = ()  # counters: prompt tokens looked up, found cached
    kv_usage: tuple[str, ...] = ()  # gauges: the share of its KV pool in use, first match wins
