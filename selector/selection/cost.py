"""Capacity into machines and money: how many instances of a variant the user's peak traffic needs
(policy.traffic_rps, each instance planned to hold the capacity measured at the SLO on this machine:
its interval's lower bound when it has one), what they cost a month at policy.cost_per_hour, and
per million input, output and total tokens at that traffic.

Pure arithmetic over a RunRecord's CapacityResult (the rate search's, else the concurrency
search's); policy.objective=cost_at_traffic ranks by the monthly cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from selector.config import PolicyConfig
from selector.measure.load_driver import parse_slo_key
from selector.records import CapacityResult, RunRecord

HOURS_PER_MONTH = 730.0  # 8760 hours a year / 12
SECONDS_PER_MONTH = 3600.0 * HOURS_PER_MONTH


@dataclass(frozen=True)
class TrafficCost:
    capacity_rps: float  # what one instance is planned to hold within the SLO
    traffic_rps: float
    instances: int
    cost_per_hour: float  # of one instance
    cost_per_month: float
    input_tokens_per_request: float | None = None  # as measured by the capacity search
    output_tokens_per_request: float | None = None
    # USD per million tokens of that kind at the traffic: the whole monthly cost over that kind's
    # tokens a month (so the three do not add up; total counts input and output together)
    per_million_input: float | None = None
    per_million_output: float | None = None
    per_million_total: float | None = None
    planned_on: str = "estimate"  # "lower bound": the capacity's interval's; "estimate": it has none


def traffic_cost(capacity_rps: float, traffic_rps: float, cost_per_hour: float,
                 output_tokens_per_request: float | None = None, input_tokens_per_request: float | None = None,
                 planned_on: str = "estimate") -> TrafficCost:
    if capacity_rps <= 0 or traffic_rps <= 0 or cost_per_hour < 0:
        raise ValueError("capacity and traffic must be positive, the price not negative")
    # ceil, but 20 / 4 is 5 instances even when float division lands a hair above 5
    instances = max(1, math.ceil(traffic_rps / capacity_rps - 1e-9))
    monthly = instances * cost_per_hour * HOURS_PER_MONTH

    def per_million(tokens_per_request: float | None) -> float | None:
        if not tokens_per_request:
            return None
        return monthly / (traffic_rps * tokens_per_request * SECONDS_PER_MONTH) * 1e6

    both = (input_tokens_per_request + output_tokens_per_request
            if input_tokens_per_request and output_tokens_per_request else None)
    return TrafficCost(capacity_rps, traffic_rps, instances, cost_per_hour, monthly, input_tokens_per_request,
                       output_tokens_per_request, per_million(input_tokens_per_request),
                       per_million(output_tokens_per_request), per_million(both), planned_on)


def hourly_price(policy: PolicyConfig) -> float | None:
    return policy.cost_per_hour if policy.cost_per_hour is not None else policy.price_per_hour


def planning_capacity(record: RunRecord) -> CapacityResult | None:
    """The capacity a deployment is planned on: the rate search's (the user's traffic is a
    rate), else the concurrency search's (at the requests/s it served there)."""
    perf = record.perf
    if perf is None:
        return None
    return perf.capacity or perf.capacity_concurrency


def output_tokens_per_request(capacity: CapacityResult) -> float | None:
    """Output tokens per completed request: over the whole search, or (records made before it was
    kept) at the capacity's step."""
    if capacity.output_tokens_per_request is not None:
        return capacity.output_tokens_per_request
    step = next((s for s in capacity.steps if s.rate_rps == capacity.capacity_rps and s.passed), None)
    if step is None or step.level.request_throughput <= 0:
        return None
    return step.level.output_tokens_per_s / step.level.request_throughput


def record_cost(record: RunRecord, policy: PolicyConfig) -> TrafficCost | None:
    """A variant's cost at the policy's traffic; None without a capacity, a traffic or a price."""
    capacity = planning_capacity(record)
    price = hourly_price(policy)
    if capacity is None or not capacity.planning_rps or not policy.traffic_rps or price is None:
        return None
    return traffic_cost(capacity.planning_rps, policy.traffic_rps, price, output_tokens_per_request(capacity),
                        capacity.input_tokens_per_request,
                        "lower bound" if capacity.low_rps is not None else "estimate")


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


def held_words(capacity: CapacityResult) -> str:
    """"3.1 req/s (95% interval 2.6-3.9)", or for a concurrency search "6.4 requests in flight
    (2.1 req/s; 95% interval 5.1-7.2 in flight)"."""
    between = (f"{capacity.confidence:.0%} interval {capacity.low:.3g}-{capacity.high:.3g}"
               if capacity.low is not None and capacity.high is not None else "")
    if capacity.on == "concurrency":
        inside = "; ".join(x for x in (f"{capacity.capacity_rps:.3g} req/s" if capacity.capacity_rps else "",
                                       f"{between} in flight" if between else "") if x)
        return f"{capacity.capacity_concurrency:.3g} requests in flight" + (f" ({inside})" if inside else "")
    return f"{capacity.capacity_rps:.3g} req/s" + (f" ({between})" if between else "")


def traffic_sentence(record: RunRecord, policy: PolicyConfig) -> str | None:
    """"X holds 3.1 req/s (95% interval 2.6-3.9) at p95 e2e <= 4 s on this machine; your 20 req/s
    needs 8 of them on the lower bound, about $N per month ($M per million output tokens)"; None
    without a capacity or a traffic."""
    capacity = planning_capacity(record)
    if capacity is None or not policy.traffic_rps:
        return None
    words = slo_words(capacity.slo)
    unit = "req/s" if capacity.on == "rate" else "in flight"
    if capacity.estimate is None:
        lowest = min((s.at for s in capacity.steps), default=None)
        return (f"{record.name} does not hold {words} on this machine even at {lowest:g} {unit}"
                if lowest is not None else None)
    head = f"{record.name} holds {held_words(capacity)} at {words} on this machine"
    cost = record_cost(record, policy)
    basis = " on the lower bound" if capacity.low_rps is not None else ""
    if cost is None:  # no price (or no req/s to plan on): the instances still follow from the traffic
        if not capacity.planning_rps:
            return head
        n = max(1, math.ceil(policy.traffic_rps / capacity.planning_rps - 1e-9))
        return f"{head}; your {policy.traffic_rps:g} req/s needs {n} of them{basis}"
    tail = f" ({money(cost.per_million_output)} per million output tokens)" if cost.per_million_output else ""
    return (f"{head}; your {policy.traffic_rps:g} req/s needs {cost.instances} of them{basis}, "
            f"about {money(cost.cost_per_month)} per month{tail}")
