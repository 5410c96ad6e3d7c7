"""Capacity into machines and money: how many instances of a variant the user's peak traffic needs
(policy.traffic_rps, each instance planned to hold the capacity measured at the SLO on this machine:
its interval's lower bound when it has one), what they cost a month at policy.cost_per_hour, and
per million input, output and total tokens at that traffic.

Pure arithmetic over a RunRecord's CapacityResult (the rate search's, else the concurrency
search's); policy.objective=cost_at_traffic ranks by the monthly cost. When that capacity carries a
confirmation run (measure.load.confirm_s: the planned rate, run for minutes), the sentence says what
it held, or that it did not hold, and then offers no number of machines as a plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from selector.config import PolicyConfig
from selector.measure.load_driver import parse_slo_key
from selector.records import CapacityConfirmation, CapacityResult, RunRecord

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


def duration_words(seconds: float) -> str:
    """180 -> "3 min", 90 -> "1.5 min", 1 -> "1 s"."""
    return f"{seconds / 60:.3g} min" if seconds >= 60 else f"{seconds:.3g} s"


def ms_words(ms: float) -> str:
    """830 -> "830 ms", 2400 -> "2.4 s"."""
    return f"{ms / 1000:.3g} s" if ms >= 1000 else f"{ms:.3g} ms"


def _limit_name(key: str, named: bool) -> str:
    metric, q = parse_slo_key(key)
    return f"p{q:g} {metric.removesuffix('_ms')}" if named else f"p{q:g}"


def over_limit(check: dict[str, float | None]) -> bool:
    """A confirmation's (or probe's) check that breaks its limit: its percentile plus its rise
    across the window over the limit, or a percentile that fell on a failed request."""
    estimate, limit = check.get("estimate"), check.get("limit")
    if limit is None:
        return False
    return estimate is None or estimate + (check.get("rise") or 0.0) > limit


def first_line(note: str) -> str:
    """A note's first line (a server's log tail follows on the next lines), without a trailing colon."""
    return note.split("\n", 1)[0].rstrip(" :")


def confirmation_words(confirmation: CapacityConfirmation) -> str:
    """"held p95 830 ms for 3 min at 4 req/s", or "p95 2.4 s over the 2 s limit; 2 of 470 requests
    failed; the first: ..." (why it did not hold). The figure is named (p95 e2e) when the SLO has
    several limits."""
    checks = confirmation.checks
    named = len(checks) > 1
    rate, length = f"{confirmation.rate_rps:.3g} req/s", duration_words(confirmation.window_s)
    if confirmation.held:
        figures = " and ".join(f"{_limit_name(k, named)} {ms_words(c['estimate'])}"
                               for k, c in checks.items() if c.get("estimate") is not None)
        return f"held {figures or 'the SLO'} for {length} at {rate}"
    why = []
    for key, c in checks.items():
        if not over_limit(c):
            continue
        name, limit = _limit_name(key, named), ms_words(c["limit"])  # type: ignore[arg-type]
        if c.get("estimate") is None:
            why.append(f"{name} fell on a failed request" if confirmation.judged_requests
                       else "no request reached the judged window")
        else:
            grew = c.get("rise") or 0.0
            rising = f", rising {ms_words(grew)} across the window," if grew > 0 else ""
            why.append(f"{name} {ms_words(c['estimate'])}{rising} over the {limit} limit")  # type: ignore[arg-type]
    if confirmation.note:
        why.append(first_line(confirmation.note))
    return "; ".join(dict.fromkeys(why)) or "over the SLO"


def confirmed(capacity: CapacityResult) -> bool | None:
    """Whether the planned rate held its confirmation run; None: it had none (measure.load.confirm_s=0,
    or a record from before confirmation runs)."""
    return capacity.confirmation.held if capacity.confirmation is not None else None


def traffic_sentence(record: RunRecord, policy: PolicyConfig) -> str | None:
    """"X holds 3.1 req/s (95% interval 2.6-3.9) at p95 e2e <= 4 s on this machine (held p95 3.2 s
    for 3 min at 2.6 req/s); your 20 req/s needs 8 of them on the lower bound, about $N per month ($M
    per million output tokens)"; when the confirmation run did not hold, why, and no machines are
    offered; None without a capacity or a traffic."""
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
    trial = capacity.confirmation
    if trial is not None and not trial.held:  # the plan, tried, broke the SLO: no plan is offered
        length = duration_words(trial.window_s)
        return (f"{head}, but not for {length} at the planned {trial.rate_rps:.3g} req/s "
                f"({confirmation_words(trial)}); the machines your {policy.traffic_rps:g} req/s needs are not offered: "
                f"the planned rate did not hold for {length} on this machine")
    if trial is not None:
        head += f" ({confirmation_words(trial)})"
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
