"""A server's own view of where time goes, from its Prometheus `/metrics` text.

vLLM and TGI keep histograms of how long each request waited in their queue and how long it
computed. Scraping before and after a load level and subtracting gives the histogram of just that
level's requests; percentiles are then interpolated within buckets, as Prometheus'
`histogram_quantile` does (so they are as fine as the server's bucket edges, no finer), and held
under the bound the exact mean gives (see `quantile`). Servers without these metrics (or without
`/metrics`) simply give nothing.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from selector.engines.served.names import ServerMetricNames
from selector.engines.vllm.metrics import VLLM
from selector.records import Percentiles

log = logging.getLogger("selector.engines.served.metrics")

TGI = ServerMetricNames(server="tgi", prefix="tgi_", queue=("tgi_request_queue_duration",),
                        compute=("tgi_request_inference_duration",))
KNOWN = (VLLM, TGI)  # the servers whose names are read, in this order: first match wins

# Histogram names in seconds, first match wins.
QUEUE_HISTOGRAMS = tuple(n for s in KNOWN for n in s.queue)
COMPUTE_HISTOGRAMS = tuple(n for s in KNOWN for n in s.compute)
PREFILL_HISTOGRAMS = tuple(n for s in KNOWN for n in s.prefill)
DECODE_HISTOGRAMS = tuple(n for s in KNOWN for n in s.decode)
SPLIT_HISTOGRAMS = (("queue_ms", QUEUE_HISTOGRAMS), ("compute_ms", COMPUTE_HISTOGRAMS),
                    ("prefill_ms", PREFILL_HISTOGRAMS), ("decode_ms", DECODE_HISTOGRAMS))
SERVERS = {s.prefix: s.server for s in KNOWN}  # name prefix -> the server it tells


@dataclass
class Histogram:
    buckets: list[tuple[float, float]]  # (upper bound `le`, cumulative count), ascending, ends at +inf
    count: float
    total: float  # sum of observed values

    def plus(self, other: Histogram) -> Histogram:
        """Both servers' observations (instances of one model: same bucket edges)."""
        counts = dict(self.buckets)
        for le, c in other.buckets:
            counts[le] = counts.get(le, 0.0) + c
        return Histogram(sorted(counts.items()), self.count + other.count, self.total + other.total)

    def minus(self, before: Histogram | None) -> Histogram:
        if before is None:
            return self
        old = dict(before.buckets)
        return Histogram([(le, c - old.get(le, 0.0)) for le, c in self.buckets],
                         self.count - before.count, self.total - before.total)


def parse_histograms(text: str) -> dict[str, Histogram]:
    """Every histogram in a Prometheus text exposition, summed over its label sets."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, Histogram] = {}
    for family in text_string_to_metric_families(text):
        if family.type != "histogram":
            continue
        buckets: dict[float, float] = {}
        count = total = 0.0
        for s in family.samples:
            if s.name.endswith("_bucket"):
                le = float(s.labels["le"])  # "+Inf" parses to inf
                buckets[le] = buckets.get(le, 0.0) + s.value
            elif s.name.endswith("_count"):
                count += s.value
            elif s.name.endswith("_sum"):
                total += s.value
        if buckets:
            out[family.name] = Histogram(sorted(buckets.items()), count, total)
    return out


def counter(text: str, name: str) -> float | None:
    """A counter's value summed over its label sets (`name` without `_total`); None when absent or
    when the page is not Prometheus text."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        values = [s.value for f in text_string_to_metric_families(text) if f.name == name and f.type == "counter"
                  for s in f.samples if s.name == name + "_total"]
    except ValueError as e:
        log.debug("metrics page not Prometheus text: %s", e)
        return None
    return sum(values) if values else None


# Prefix-cache counters, in prompt tokens: (looked up, found cached); only vLLM's are known.
PREFIX_CACHE_COUNTERS = VLLM.prefix_cache


async def scrape_counters(client: Any, urls: list[str], names: tuple[str, ...] = PREFIX_CACHE_COUNTERS
                          ) -> dict[str, float] | None:
    """The named counters summed over every instance; None when an instance has no /metrics or
    lacks one of them (a share of only some instances' tokens would pass for all of them)."""
    summed = dict.fromkeys(names, 0.0)
    for url in urls:
        try:
            resp = await client.get(url, timeout=10.0)
        except Exception as e:
            log.debug("no Prometheus metrics at %s: %s", url, e)
            return None
        if resp.status_code != 200:
            return None
        for name in names:
            value = counter(resp.text, name)
            if value is None:
                return None
            summed[name] += value
    return summed


def prefix_cache_hit_rate(before: dict[str, float] | None, after: dict[str, float] | None) -> float | None:
    """Share of the prompt tokens looked up between two scrapes that the prefix cache held."""
    if not before or not after:
        return None
    queried, hit = (after[n] - before[n] for n in PREFIX_CACHE_COUNTERS)
    return hit / queried if queried > 0 else None


def quantile(h: Histogram, q: float) -> float:
    """Linear interpolation inside the bucket that holds rank q*count (histogram_quantile), held
    at or under mean/(1-q). vLLM's request-time buckets start at 0.3 s, so a level of 5 ms requests
    would otherwise read p50 = 150 ms; durations are never negative, so at least a share 1-q of them
    being >= the q-quantile x gives (1-q)*x <= mean (Markov's inequality): the bound is exact
    arithmetic on the exact sum, not a guess."""
    bound = h.total / h.count / (1 - q) if h.count > 0 and q < 1 else math.inf
    return min(_interpolated(h, q), bound)


def _interpolated(h: Histogram, q: float) -> float:
    rank = q * h.count
    lower, below = 0.0, 0.0
    for le, cum in h.buckets:
        if cum >= rank:
            if math.isinf(le):  # beyond the last finite edge: the edge is all we know
                return lower
            inside = cum - below
            return lower + (le - lower) * ((rank - below) / inside if inside > 0 else 1.0)
        lower, below = le, cum
    return lower


def percentiles_ms(h: Histogram | None) -> Percentiles | None:
    if h is None or h.count <= 0:
        return None
    qs = [quantile(h, q) * 1e3 for q in (0.50, 0.90, 0.95, 0.99)]
    return Percentiles(p50=qs[0], p90=qs[1], p95=qs[2], p99=qs[3], mean=h.total / h.count * 1e3, n=int(h.count))


def first_present(hists: dict[str, Histogram], names: tuple[str, ...]) -> Histogram | None:
    return next((hists[n] for n in names if n in hists), None)


async def scrape(client: Any, url: str) -> dict[str, Histogram] | None:
    """The histograms at `url` (an httpx.AsyncClient does the GET); None when there are none."""
    try:
        resp = await client.get(url, timeout=10.0)
        if resp.status_code != 200:
            return None
        return parse_histograms(resp.text)
    except Exception as e:  # no metrics endpoint, or not Prometheus text: nothing to add
        log.debug("no Prometheus metrics at %s: %s", url, e)
        return None


async def scrape_all(client: Any, urls: list[str]) -> dict[str, Histogram] | None:
    """The histograms of every instance, summed; None when one of them has none (a split of only
    some instances' requests would pass for all of them)."""
    summed: dict[str, Histogram] = {}
    for url in urls:
        got = await scrape(client, url)
        if got is None:
            return None
        for name, h in got.items():
            summed[name] = summed[name].plus(h) if name in summed else h
    return summed


def level_split(before: dict[str, Histogram] | None, after: dict[str, Histogram] | None) -> dict[str, Percentiles]:
    """queue_ms / compute_ms (and vLLM's prefill_ms / decode_ms) percentiles for the requests a load
    level added to the server's histograms."""
    if not after:
        return {}
    out = {}
    for field, names in SPLIT_HISTOGRAMS:
        now = first_present(after, names)
        if now is None:
            continue
        then = first_present(before or {}, names)
        p = percentiles_ms(now.minus(then))
        if p is not None:
            out[field] = p
    return out


def split_source(after: dict[str, Histogram] | None) -> tuple[str, str]:
    """(which server's histograms gave the split, why there is none), for the report to say plainly."""
    if after is None:
        return "", "the server has no Prometheus /metrics endpoint, so only the client's TTFT, ITL and e2e are known"
    found = [n for n in (*QUEUE_HISTOGRAMS, *COMPUTE_HISTOGRAMS) if n in after]
    if not found:
        known = ", ".join(QUEUE_HISTOGRAMS + COMPUTE_HISTOGRAMS)
        return "", (f"the server's /metrics has no queue or compute histogram selector knows ({known}), so only the "
                    "client's TTFT, ITL and e2e are known")
    source = next(server for prefix, server in SERVERS.items() if found[0].startswith(prefix))
    return source, ""
