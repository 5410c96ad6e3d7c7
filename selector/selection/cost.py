"""Capacity into machines and money: how many instances of a variant the user's peak traffic needs
(policy.traffic_rps, each instance holding the capacity measured at the SLO on this machine), what
they cost a month at policy.cost_per_hour, and per million output tokens at that traffic.

Pure arithmetic over a RunRecord's CapacityResult; policy.objective=cost_at_traffic ranks by the
monthly cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from selector.config import PolicyConfig
from selector.measure.load_driver import parse_slo_key
from selector.records import CapacityResult, RunRecord

HOURS_PER_MONTH = 730.0  # 8760 hours a year / 12


@dataclass(frozen=True)
class TrafficCost:
    capacity_rps: float  # what one instance holds within the SLO
    traffic_rps: float
    instances: int
    cost_per_hour: float  # of one instance
    cost_per_month: float
    tokens_per_request: float | None  # output tokens, as measured at capacity
    cost_per_million_tokens: float | None  # output tokens, at the user's traffic


def traffic_cost(capacity_rps: float, traffic_rps: float, cost_per_hour: float,
                 tokens_per_request: float | None = None) -> TrafficCost:
    if capacity_rps <= 0 or traffic_rps <= 0 or cost_per_hour < 0:
        raise ValueError("capacity and traffic must be positive, the price not negative")
    # ceil, but 20 / 4 is 5 instances even when float division lands a hair above 5
    instances = max(1, math.ceil(traffic_rps / capacity_rps - 1e-9))
    monthly = instances * cost_per_hour * HOURS_PER_MONTH
    per_million = None
    if tokens_per_request:
        tokens_a_month = traffic_rps * tokens_per_request * 3600.0 * HOURS_PER_MONTH
        per_million = monthly / tokens_a_month * 1e6
    return TrafficCost(capacity_rps, traffic_rps, instances, cost_per_hour, monthly, tokens_per_request, per_million)


def hourly_price(policy: PolicyConfig) -> float | None:
    return policy.cost_per_hour if policy.cost_per_hour is not None else policy.price_per_hour


def tokens_per_request(capacity: CapacityResult) -> float | None:
    """Output tokens per completed request at the capacity's step."""
    step = next((s for s in capacity.steps if s.rate_rps == capacity.capacity_rps and s.passed), None)
    if step is None or step.level.request_throughput <= 0:
        return None
    return step.level.output_tokens_per_s / step.level.request_throughput


def record_cost(record: RunRecord, policy: PolicyConfig) -> TrafficCost | None:
    """A variant's cost at the policy's traffic; None without a capacity, a traffic or a price."""
    capacity = record.perf.capacity if record.perf else None
    price = hourly_price(policy)
    if capacity is None or capacity.capacity_rps is None or not policy.traffic_rps or price is None:
        return None
    return traffic_cost(capacity.capacity_rps, policy.traffic_rps, price, tokens_per_request(capacity))


def cost_at_traffic(record: RunRecord, policy: PolicyConfig) -> float | None:
    """The objective: USD a month for the instances the traffic needs."""
    cost = record_cost(record, policy)
    return cost.cost_per_month if cost else None


def slo_words(slo: dict[str, float]) -> str:
    """{"e2e_ms_p95": 4000} -> "p95 e2e <= 4 s" (percentile limits only)."""
    parts = []
    for key, limit in slo.items():
        metric, q = parse_slo_key(key)
        if q is None:
            continue
        value = f"{limit / 1000:g} s" if limit >= 1000 else f"{limit:g} ms"
        parts.append(f"p{q:g} {metric.removesuffix('_ms')} <= {value}")
    return " and ".join(parts)


def money(x: float) -> str:
    return f"${x:,.0f}" if x >= 100 else f"${x:,.2f}"


def traffic_sentence(record: RunRecord, policy: PolicyConfig) -> str | None:
    """"X holds 3.1 req/s at p95 e2e <= 4 s on this machine; your 20 req/s needs 7 of them, about
    $N per month ($M per million output tokens)"; None without a capacity or a traffic."""
    capacity = record.perf.capacity if record.perf else None
    if capacity is None or not policy.traffic_rps:
        return None
    words = slo_words(capacity.slo)
    if capacity.capacity_rps is None:
        lowest = min((s.rate_rps for s in capacity.steps), default=None)
        return (f"{record.name} does not hold {words} on this machine even at {lowest:g} req/s"
                if lowest is not None else None)
    cost = record_cost(record, policy)
    head = f"{record.name} holds {capacity.capacity_rps:.3g} req/s at {words} on this machine"
    if cost is None:  # no price: the instances still follow from the traffic
        n = max(1, math.ceil(policy.traffic_rps / capacity.capacity_rps - 1e-9))
        return f"{head}; your {policy.traffic_rps:g} req/s needs {n} of them"
    tail = f" ({money(cost.cost_per_million_tokens)} per million output tokens)" if cost.cost_per_million_tokens else ""
    return (f"{head}; your {policy.traffic_rps:g} req/s needs {cost.instances} of them, "
            f"about {money(cost.cost_per_month)} per month{tail}")
