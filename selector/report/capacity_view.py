"""The report's capacity tables (measure.load.capacity): per variant, the highest arrival rate
within the SLO, what it serves and uses there and, given policy.traffic_rps, the machines and
money the user's traffic needs; below, every probe of the search (p95 against rate)."""

from __future__ import annotations

from typing import Any

from selector.config import PolicyConfig
from selector.report import fmt
from selector.report.view import Cell, Table, order_records
from selector.selection.cost import money, record_cost, slo_words
from selector.records import RunRecord


def with_capacity(records: list[RunRecord]) -> list[RunRecord]:
    return [r for r in order_records(records) if r.perf and r.perf.capacity]


def policy_of(selection_policy: dict[str, Any] | None) -> PolicyConfig | None:
    if not selection_policy:
        return None
    known = {k: v for k, v in selection_policy.items() if k in PolicyConfig.__dataclass_fields__}
    return PolicyConfig(**known)


def _pct(value: float | None) -> Cell:
    return Cell(f"{value:.0f}%" if value is not None else fmt.DASH, "num" if value is not None else "num muted")


def capacity_table(records: list[RunRecord], policy: PolicyConfig | None = None) -> Table | None:
    found = with_capacity(records)
    if not found:
        return None
    traffic = bool(policy and policy.traffic_rps)
    priced = traffic and any(record_cost(r, policy) for r in found)  # type: ignore[arg-type]
    columns = ["variant", "capacity req/s", "output tok/s", "CPU", "GPU", "probes", "search time"]
    columns += ["instances", "per month", "per M output tokens"] if priced else []
    table = Table(columns=columns)
    notes = []
    for r in found:
        c = r.perf.capacity  # type: ignore[union-attr]
        if c.capacity_rps is None:
            held = Cell(f"< {fmt.sig(c.failed_rps)}", "num below", "even the lowest rate probed broke the SLO")
        else:
            held = Cell(fmt.sig(c.capacity_rps), "num strong",
                        sub=f"fails at {fmt.sig(c.failed_rps)}" if c.failed_rps else "none failed")
        row = [Cell(r.name, "name"), held, Cell(fmt.sig(c.output_tokens_per_s), "num"), _pct(c.cpu_util_pct),
               _pct(c.gpu_util_pct), Cell(str(len(c.steps)), "num"), Cell(fmt.seconds(c.wall_s), "num")]
        if priced:
            cost = record_cost(r, policy)  # type: ignore[arg-type]
            if cost is None:
                row += [Cell(fmt.DASH, "num muted")] * 3
            else:
                per_m = money(cost.cost_per_million_tokens) if cost.cost_per_million_tokens else fmt.DASH
                row += [Cell(str(cost.instances), "num"), Cell(money(cost.cost_per_month), "num"), Cell(per_m, "num")]
        table.rows.append(row)
        if c.note:
            notes.append(f"{r.name}: {c.note}.")
    first = found[0].perf.capacity  # type: ignore[union-attr]
    table.note = " ".join([
        f"The highest Poisson arrival rate whose requests met {slo_words(first.slo)} at the upper "
        f"{first.confidence:.0%} confidence bound (failed requests count as too slow), found by doubling or "
        f"halving then bisecting to within {first.tolerance:.0%}; {first.requests_per_step} requests a probe. "
        "CPU and GPU: utilisation of the machine at that rate.",
        (f"Cost: ceil({policy.traffic_rps:g} req/s / capacity) machines at policy.cost_per_hour, 730 hours a month."
         if priced else ""),
        *notes]).strip()
    return table


def curve_table(records: list[RunRecord]) -> Table | None:
    """Every probe, by rate: what each rate gave, p95 against rate."""
    found = with_capacity(records)
    if not found:
        return None
    table = Table(columns=["variant", "offered req/s", "within SLO", "served req/s", "TTFT p95 ms", "ITL p95 ms",
                           "e2e p95 ms", "errors", "upper bounds"])
    for r in found:
        for step in sorted(r.perf.capacity.steps, key=lambda s: s.rate_rps):  # type: ignore[union-attr]
            lv = step.level
            bounds = ", ".join(f"{k} {fmt.millis(v['upper']) if v['upper'] is not None else 'inf'}"
                               f" / {fmt.millis(v['limit'])}" for k, v in step.checks.items())
            p95 = lambda d: fmt.millis(d.p95 if d else None)  # noqa: E731
            table.rows.append([
                Cell(r.name, "name"), Cell(fmt.sig(step.rate_rps), "num"),
                Cell("yes" if step.passed else "no", "" if step.passed else "below"),
                Cell(fmt.sig(lv.request_throughput), "num"), Cell(p95(lv.ttft_ms), "num"), Cell(p95(lv.itl_ms), "num"),
                Cell(p95(lv.e2e_ms), "num"), Cell(f"{lv.errors} of {lv.requests}", "num below" if lv.errors else "num"),
                Cell(bounds, "reasons"),
            ])
    table.note = ("Each probe of the capacity search, slowest rate first. Upper bounds: each limit's percentile "
                  "bounded from above at the stated confidence, against the limit (inf: a request failed or was cut "
                  "off, or too few to bound).")
    return table
