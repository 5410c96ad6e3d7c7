"""The report's capacity tables (measure.load.capacity): per variant and search (rate, concurrency),
the capacity within the SLO with its confidence interval from repeated runs, what it serves and uses
there and, given policy.traffic_rps, the machines and money the user's traffic needs; the
confirmation run at the rate the plan uses (measure.load.confirm_s); below, every probe of the
searches (latency against load)."""

from __future__ import annotations

from typing import Any

from selector.config import PolicyConfig
from selector.report import fmt
from selector.report.view import Cell, Table, order_records
from selector.selection.cost import (
    confirmation_words, duration_words, money, over_limit, planning_capacity, record_cost, slo_words,
)
from selector.records import CapacityResult, RunRecord


def searches(record: RunRecord) -> list[CapacityResult]:
    perf = record.perf
    return [c for c in (perf.capacity, perf.capacity_concurrency) if c is not None] if perf else []


def with_capacity(records: list[RunRecord]) -> list[RunRecord]:
    return [r for r in order_records(records) if searches(r)]


def policy_of(selection_policy: dict[str, Any] | None) -> PolicyConfig | None:
    if not selection_policy:
        return None
    known = {k: v for k, v in selection_policy.items() if k in PolicyConfig.__dataclass_fields__}
    return PolicyConfig(**known)


def _pct(value: float | None) -> Cell:
    return Cell(f"{value:.0f}%" if value is not None else fmt.DASH, "num" if value is not None else "num muted")


def _unit(c: CapacityResult) -> str:
    return "req/s" if c.on == "rate" else "in flight"


def held(c: CapacityResult) -> Cell:
    """The capacity in the search's unit; under it where it fails (rate) or what it serves (concurrency)."""
    if c.estimate is None:
        lowest = min((s.at for s in c.steps), default=None)
        return Cell(f"< {fmt.sig(lowest)} {_unit(c)}", "num below", "even the lowest level probed broke the SLO")
    if c.on == "concurrency":
        return Cell(f"{fmt.sig(c.capacity_concurrency)} in flight", "num strong",
                    sub=f"{fmt.sig(c.capacity_rps)} req/s served" if c.capacity_rps else "")
    fails = c.failed_rps
    if fails is None:
        sub = "none failed"
    elif fails > c.capacity_rps:  # type: ignore[operator]
        sub = f"fails at {fmt.sig(fails)}"
    else:  # a run that never crossed pulled the estimate below where the combined runs fail
        sub = f"runs combined: over from {fmt.sig(fails)}"
    return Cell(f"{fmt.sig(c.capacity_rps)} req/s", "num strong", sub=sub)


def interval_cell(c: CapacityResult) -> Cell:
    if c.low is None or c.high is None:
        why = "one run per level (capacity_repeats=1)" if c.estimate is not None else ""
        return Cell(fmt.DASH, "num muted", why)
    straddle = (f"straddles the SLO at {', '.join(fmt.sig(x) for x in c.straddles)}" if c.straddles else "")
    return Cell(f"{fmt.sig(c.low)} – {fmt.sig(c.high)}", "num", f"{len(c.runs)} runs' crossings: "
                + ", ".join(fmt.sig(x) for x in c.runs), sub=straddle)


def capacity_table(records: list[RunRecord], policy: PolicyConfig | None = None) -> Table | None:
    found = with_capacity(records)
    if not found:
        return None
    traffic = bool(policy and policy.traffic_rps)
    priced = traffic and any(record_cost(r, policy) for r in found)  # type: ignore[arg-type]
    first = searches(found[0])[0]
    columns = ["variant", "capacity", f"{first.confidence:.0%} interval", "output tok/s", "CPU", "GPU", "probes",
               "search time"]
    columns += ["instances", "per month", "per M input tokens", "per M output tokens", "per M tokens"] if priced else []
    table = Table(columns=columns)
    notes, lower = [], False
    for r in found:
        planned = planning_capacity(r)
        for c in searches(r):
            row = [Cell(r.name, "name", sub=f"by {c.on}"), held(c), interval_cell(c), Cell(fmt.sig(c.output_tokens_per_s), "num"),
                   _pct(c.cpu_util_pct), _pct(c.gpu_util_pct), Cell(str(len(c.steps)), "num"),
                   Cell(fmt.seconds(c.wall_s), "num")]
            if priced:
                cost = record_cost(r, policy) if c is planned else None  # type: ignore[arg-type]
                if cost is None:
                    row += [Cell(fmt.DASH, "num muted")] * 5
                elif c.confirmation is not None and not c.confirmation.held:  # the plan, tried, broke the SLO
                    lower |= cost.planned_on == "lower bound"
                    row += [Cell("not offered", "num below", f"{cost.instances} at {fmt.sig(cost.capacity_rps)} "
                                 "req/s each, a rate that broke the SLO in the confirmation run",
                                 sub=f"{fmt.sig(cost.capacity_rps)} req/s did not hold")]
                    row += [Cell(fmt.DASH, "num muted")] * 4
                else:
                    lower |= cost.planned_on == "lower bound"
                    row += [Cell(str(cost.instances), "num", sub=f"at {fmt.sig(cost.capacity_rps)} req/s each"),
                            Cell(money(cost.cost_per_month), "num")]
                    row += [Cell(money(x) if x else fmt.DASH, "num" if x else "num muted")
                            for x in (cost.per_million_input, cost.per_million_output, cost.per_million_total)]
            table.rows.append(row)
            if c.note:
                notes.append(f"{r.name} by {c.on}: {c.note}.")
    probe, how = probe_words(first)
    table.note = " ".join(x for x in [
        f"The highest Poisson arrival rate (by rate) or number of requests in flight (by concurrency) at which "
        f"{probe} meets {slo_words(first.slo)} (failed requests count as too slow): "
        "each run's crossing of the SLO, interpolated between its probes; the capacity is their geometric mean and "
        f"the interval Student's t over the runs at {first.confidence:.0%}.", how,
        "CPU and GPU: utilisation of the machine at the highest level within the SLO.",
        (f"Cost: ceil({policy.traffic_rps:g} req/s / capacity) machines at policy.cost_per_hour, 730 hours a month"  # type: ignore[union-attr]
         + (", the capacity taken at its interval's lower bound" if lower else "")
         + "; per million tokens of each kind: the monthly cost over that kind's tokens a month at the traffic."
         if priced else ""),
        *notes] if x).strip()
    return table


def probe_words(c: CapacityResult) -> tuple[str, str]:
    """(what meets the SLO, how a probe ran): a steady-state window after a warm-up, or (records from
    before steady-state probes) a burst of requests."""
    if c.probe_s is None:
        return f"a run of {c.requests_per_step} requests", ""
    warm = f"{c.warmup_s:g} s of warm-up plus " if c.warmup_s else ""
    return "a probe", (f"Each probe sends for {warm}a {c.probe_s:g} s judged window (at least "
                       f"{c.requests_per_step} requests judged); what is judged is each limited percentile of the "
                       "window plus its rise across it.")


def confirmations(records: list[RunRecord]) -> list[tuple[RunRecord, CapacityResult]]:
    """(record, the search that carries it) for every confirmation run, in the report's order."""
    return [(r, c) for r in with_capacity(records) for c in searches(r) if c.confirmation is not None]


def _check_words(key: str, check: dict[str, float | None]) -> str:
    """"e2e_ms_p95 830 ms (rise 12 ms) / 2,000 ms"; inf: it fell on a failed request."""
    estimate, grew = check.get("estimate"), check.get("rise")
    shown = fmt.millis(estimate) if estimate is not None else "inf"
    rising = f" (rise {fmt.millis(grew)})" if estimate is not None and grew is not None else ""
    return f"{key} {shown}{rising} / {fmt.millis(check.get('limit'))}"


def confirmation_table(records: list[RunRecord]) -> Table | None:
    """The plan, tried: per variant, the open-loop run at the rate the plan uses, judged like a probe."""
    found = confirmations(records)
    if not found:
        return None
    table = Table(columns=["variant", "planned rate", "judged window", "served req/s", "estimate / limit", "held",
                           "errors", "note"])
    for r, c in found:
        t = c.confirmation
        assert t is not None
        lv = t.level
        broke = [k for k, v in t.checks.items() if over_limit(v)]
        table.rows.append([
            Cell(r.name, "name", sub=f"by {c.on}"), Cell(f"{fmt.sig(t.rate_rps)} req/s", "num"),
            Cell(duration_words(t.window_s), "num", sub=f"after {t.warmup_s:g} s of warm-up; "
                 f"{t.judged_requests} requests judged"),
            Cell(fmt.sig(lv.request_throughput), "num"),
            Cell(", ".join(_check_words(k, v) for k, v in t.checks.items()), "reasons",
                 sub=f"over: {', '.join(broke)}" if broke and not t.held else ""),
            Cell("yes" if t.held else "no", "" if t.held else "below", t.stopped,
                 sub="over-saturated" if t.stopped else ""),
            Cell(f"{lv.errors} of {lv.requests}", "num below" if lv.errors else "num"),
            Cell(t.note or fmt.DASH, "reasons" if t.note else "muted")])
    table.note = ("After the search, an open-loop run at the rate the plan uses (the interval's lower bound, else the "
                  "estimate) for measure.load.confirm_s, judged like a probe on the requests sent after its warm-up: "
                  "it held when every limited percentile plus its rise across the window stayed within its limit. "
                  "Where it did not, the machines for policy.traffic_rps are not offered as a plan.")
    return table


def confirmation_lines(records: list[RunRecord]) -> list[tuple[str, bool]]:
    """One line per confirmation run, for the console: (text, held)."""
    out = []
    for r, c in confirmations(records):
        t = c.confirmation
        assert t is not None
        words = (confirmation_words(t) if t.held else
                 f"did not hold for {duration_words(t.window_s)} at {t.rate_rps:.3g} req/s ({confirmation_words(t)}); "
                 "the plan is not offered")
        out.append((f"{r.name} by {c.on}, confirmation run: {words}", t.held))
    return out


def curve_table(records: list[RunRecord]) -> Table | None:
    """Every probe, by level: what each run gave, latency against load."""
    found = with_capacity(records)
    if not found:
        return None
    cached = any(s.level.prefix_cache_hit_rate is not None for r in found for c in searches(r) for s in c.steps)
    table = Table(columns=["variant", "level", "run", "within SLO", "served req/s", "TTFT p95 ms", "ITL p95 ms",
                           "e2e p95 ms", "errors", "estimate / limit", *(["prefix cache"] if cached else [])])
    for r in found:
        for c in searches(r):
            for step in sorted(c.steps, key=lambda s: (s.at, s.repeat)):
                lv = step.level
                shown = ", ".join(f"{k} {fmt.millis(v['estimate']) if v.get('estimate') is not None else 'inf'}"
                                  f" / {fmt.millis(v['limit'])}" for k, v in step.checks.items())
                p95 = lambda d: fmt.millis(d.p95 if d else None)  # noqa: E731
                fit = "" if step.within_fit is None or step.within_fit == step.passed else (
                    f"combined runs: {'within' if step.within_fit else 'over'}")
                within = Cell("yes" if step.passed else "no", "" if step.passed else "below",
                              step.stopped, sub=fit or ("over-saturated" if step.stopped else ""))
                level = f"{fmt.sig(step.at)} req/s" if c.on == "rate" else f"{step.concurrency} in flight"
                row = [Cell(r.name, "name"), Cell(level, "num"), Cell(str(step.repeat), "num"), within,
                       Cell(fmt.sig(lv.request_throughput), "num"), Cell(p95(lv.ttft_ms), "num"),
                       Cell(p95(lv.itl_ms), "num"), Cell(p95(lv.e2e_ms), "num"),
                       Cell(f"{lv.errors} of {lv.requests}", "num below" if lv.errors else "num"),
                       Cell(shown, "reasons")]
                if cached:
                    rate = lv.prefix_cache_hit_rate
                    row.append(Cell(f"{rate:.0%}" if rate is not None else fmt.DASH, "num"))
                table.rows.append(row)
    table.note = ("Each probe of the capacity searches, lowest level first; run 0 located the boundary, runs 1, 2, ... "
                  "repeated it with their own arrivals. Estimate / limit: each limited percentile of the probe "
                  "(inf: it fell on a failed or cut-off request). 'Combined runs': every run at that level together, "
                  "made monotone over the levels, where it differs from this run's own verdict."
                  + (" Prefix cache: share of the probe's prompt tokens the server found cached." if cached else ""))
    return table
