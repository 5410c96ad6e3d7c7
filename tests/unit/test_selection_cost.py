"""Capacity into instances and money (selector.selection.cost), policy.objective=cost_at_traffic,
and the headline sentence it gives."""

from __future__ import annotations

import pytest

from selector.config import PolicyConfig
from selector.errors import ConfigError
from selector.selection import select
from selector.selection.cost import HOURS_PER_MONTH, record_cost, slo_words, traffic_cost, traffic_sentence
from selector.records import CapacityConfirmation, CapacityResult, CapacityStep, LoadLevel
from tests.factories import perf, run_record, task_result


def capacity(rps: float | None, tokens_per_request: float = 100.0, slo: dict | None = None) -> CapacityResult:
    """A capacity as records made before intervals were (one run, no token counts kept)."""
    rate = rps if rps is not None else 0.5
    level = LoadLevel(rate_rps=rate, requests=59, errors=0, duration_s=10.0, request_throughput=rate,
                      output_tokens_per_s=rate * tokens_per_request, cpu_util_pct=70.0)
    bound = 1500.0 if rps is not None else None
    step = CapacityStep(rate_rps=rate, passed=rps is not None, level=level,
                        checks={"e2e_ms_p95": {"estimate": 1000.0 if rps else 9000.0, "upper": bound, "limit": 4000.0}})
    return CapacityResult(slo=slo or {"e2e_ms_p95": 4000}, confidence=0.95, tolerance=0.1, requests_per_step=59,
                          capacity_rps=rps, failed_rps=None if rps else rate, steps=[step],
                          output_tokens_per_s=level.output_tokens_per_s, cpu_util_pct=level.cpu_util_pct,
                          note="" if rps else "even the lowest...")


def record(name: str, weight_gb: float, cap: float | None, accuracy: int = 9):  # type: ignore[no-untyped-def]
    p = perf()
    p.capacity = capacity(cap)
    return run_record(name, "bf16", [task_result("t", [1.0] * accuracy + [0.0] * (10 - accuracy))],
                      weight_bytes=int(weight_gb * 1e9), perf=p)


def test_instances_are_the_ceiling_of_traffic_over_capacity() -> None:
    cost = traffic_cost(capacity_rps=3.1, traffic_rps=20.0, cost_per_hour=2.0, output_tokens_per_request=150.0,
                        input_tokens_per_request=850.0)
    assert cost.instances == 7  # 20 / 3.1 = 6.45
    monthly = 7 * 2.0 * 730
    assert cost.cost_per_month == pytest.approx(monthly)
    requests = 20.0 * 3600 * 730  # requests a month at the traffic
    assert cost.per_million_output == pytest.approx(monthly / (requests * 150) * 1e6)
    assert cost.per_million_input == pytest.approx(monthly / (requests * 850) * 1e6)
    assert cost.per_million_total == pytest.approx(monthly / (requests * 1000) * 1e6)
    assert cost.per_million_input < cost.per_million_output and cost.planned_on == "estimate"
    assert traffic_cost(4.0, 20.0, 1.0).instances == 5  # exactly divisible: no sixth machine
    assert traffic_cost(0.1 + 0.2, 0.9, 1.0).instances == 3  # 0.9 / 0.30000000000000004 rounds the right way
    assert traffic_cost(50.0, 20.0, 1.0).instances == 1
    none = traffic_cost(4.0, 20.0, 1.0)
    assert none.per_million_output is None and none.per_million_total is None  # no token count: no per-token price
    assert HOURS_PER_MONTH == 730
    with pytest.raises(ValueError):
        traffic_cost(0.0, 20.0, 1.0)


def test_slo_words() -> None:
    words = slo_words({"e2e_ms_p95": 4000, "ttft_ms_p99": 500, "e2e_ms": 9000})
    assert words == "p95 e2e <= 4 s and p99 ttft <= 500 ms"


def test_cost_at_traffic_ranks_by_monthly_cost_and_says_it_in_the_headline() -> None:
    records = [record("small", 0.3, 1.0), record("big", 1.0, 3.1), record("slow", 0.2, None)]
    policy = PolicyConfig(floors={"t": 0.8}, objective="cost_at_traffic", traffic_rps=20.0, cost_per_hour=2.0)
    s = select(records, policy)
    verdicts = {v.variant: v for v in s.verdicts}
    assert verdicts["small/bf16"].objective == pytest.approx(20 * 2.0 * 730)  # 20 machines
    assert verdicts["big/bf16"].objective == pytest.approx(7 * 2.0 * 730)
    assert s.winner == "big/bf16"  # bigger weights, fewer machines
    assert verdicts["slow/bf16"].status == "rejected"
    assert any("measure.load.capacity=true" in r for r in verdicts["slow/bf16"].reasons)
    assert ("big/bf16 holds 3.1 req/s at p95 e2e <= 4 s on this machine; your 20 req/s needs 7 of them, "
            "about $10,220 per month ($1.94 per million output tokens).") in s.summary
    assert s.summary.startswith("Recommend big/bf16: the cheapest variant at your traffic")
    cost = record_cost(records[1], policy)
    assert cost is not None and cost.output_tokens_per_request == pytest.approx(100.0)
    # Under another objective the traffic sentence still follows the recommendation.
    s = select(records, PolicyConfig(floors={"t": 0.8}, traffic_rps=20.0, cost_per_hour=2.0))
    assert s.winner == "slow/bf16" and "slow/bf16 does not hold p95 e2e <= 4 s on this machine even at 0.5 req/s" \
        in s.summary


def test_cost_at_traffic_needs_a_traffic_and_a_price() -> None:
    records = [record("a", 0.3, 1.0)]
    with pytest.raises(ConfigError, match="traffic_rps"):
        select(records, PolicyConfig(objective="cost_at_traffic", cost_per_hour=1.0))
    with pytest.raises(ConfigError, match="cost_per_hour"):
        select(records, PolicyConfig(objective="cost_at_traffic", traffic_rps=5.0))
    s = select(records, PolicyConfig(objective="cost_at_traffic", traffic_rps=5.0, price_per_hour=1.0))
    assert s.winner == "a/bf16" and s.verdicts[0].objective == pytest.approx(5 * 730)


def test_the_report_and_console_show_capacity_cost_and_the_probes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import io

    from rich.console import Console

    from selector.report import render_terminal_summary, write_report

    records = [record("small", 0.3, 1.0), record("big", 1.0, 3.1), record("slow", 0.2, None)]
    policy = PolicyConfig(floors={"t": 0.8}, objective="cost_at_traffic", traffic_rps=20.0, cost_per_hour=2.0)
    s = select(records, policy)
    paths = write_report(records, s, {"experiment": "x"}, tmp_path)
    md = paths["md"].read_text()
    assert "### Capacity at the SLO" in md and "### Load levels" not in md  # no ladder ran: no empty tables
    row = next(line for line in md.splitlines() if line.startswith("| big/bf16") and "$10,220" in line)
    assert "3.10 req/s" in row and "| 7 (at 3.10 req/s each) |" in row and "$1.94" in row
    assert "&lt; 0.500 req/s" in md and "slow/bf16 by rate: even the lowest" in md
    assert "ceil(20 req/s / capacity) machines" in md
    assert "### Latency against load" in md and "| small/bf16 | 1.00 req/s | 0 | yes |" in md
    html = paths["html"].read_text()
    assert 'id="load-capacity"' in html and "$10,220" in html
    assert "plot-capacity" in html and "Latency vs arrival rate: the capacity search" in html
    assert "e2e_ms_p95 1,000 / 4,000" in md or "e2e_ms_p95 1000 / 4000" in md  # each probe's estimate and limit
    out = io.StringIO()
    Console(file=out, width=200).print(render_terminal_summary(records, s))
    assert "Capacity at the SLO" in out.getvalue() and "$10,220" in out.getvalue()


def test_capacity_and_its_probes_become_mlflow_metrics() -> None:
    from selector.trackers.naming import load_metrics, record_metrics

    r = record("big", 1.0, 3.1)
    m = record_metrics(r)
    assert m["capacity/rps"] == 3.1 and m["capacity/probes"] == 1 and m["capacity/output_tokens_per_s"] == 310
    assert m["capacity/cpu_util_pct"] == 70 and "capacity/failed_rps" not in m
    steps = load_metrics(r)
    assert ("capacity_probe/rate_rps", 3.1, 0) in steps and ("capacity_probe/passed", 1.0, 0) in steps
    replay = LoadLevel(requests=3, errors=0, duration_s=1.0, request_throughput=3.0, output_tokens_per_s=9.0,
                       replay_scale=0.5)
    r.perf.load.append(replay)  # type: ignore[union-attr]
    assert ("load_recorded0.5/request_throughput", 3.0, 0) in load_metrics(r)


def test_a_load_test_asked_for_is_never_silently_missing() -> None:
    asked = {"measure": {"load": {"enabled": True, "capacity": False}}}
    done = record("big", 1.0, 3.1)
    stopped = run_record("tiny", "int4", status="stopped", reason="stopped early: t below its floor", config=asked)
    skipped = run_record("huge", "bf16", status="not_needed", reason="not needed", config=asked)
    quiet = run_record("other", "int4", status="stopped", config={"measure": {"load": {"enabled": False}}})
    s = select([done, stopped, skipped, quiet], PolicyConfig(floors={"t": 0.8}))
    assert ("No load figures for tiny/int4, though measure.load asked for them: the adaptive search stopped them "
            "early below a floor. Run again with search=grid to measure them.") in s.warnings
    assert any(w.startswith("No load figures for huge/bf16") and "search.complete=true" in w for w in s.warnings)
    assert not any("other/int4" in w for w in s.warnings if w.startswith("No load figures"))  # it asked for none


def test_no_capacity_anywhere_says_nothing_can_be_ranked_not_that_a_floor_failed() -> None:
    s = select([record("slow", 0.2, None)], PolicyConfig(floors={"t": 0.8}, objective="cost_at_traffic",
                                                         traffic_rps=20.0, cost_per_hour=1.0))
    assert s.winner is None
    assert s.summary.startswith("No variant can be ranked on objective cost_at_traffic: slow/bf16 cost per month")
    assert "measure.load.capacity=true" in s.summary and "floor" not in s.summary.split(":")[0]


def interval_capacity(on: str = "rate") -> CapacityResult:
    """A capacity of today's searches: 5 runs, an interval, token counts, a straddled level."""
    level = LoadLevel(rate_rps=3.0, concurrency=None, requests=59, errors=0, duration_s=20.0, request_throughput=3.0,
                      output_tokens_per_s=300.0, input_tokens_per_s=2400.0, cpu_util_pct=80.0)
    steps = [CapacityStep(**({"rate_rps": 3.0} if on == "rate" else {"concurrency": 6}), repeat=run,
                          passed=run != 2, level=level, margin=-0.1 if run != 2 else 0.05, within_fit=True,
                          checks={"e2e_ms_p95": {"estimate": 1800.0, "limit": 2000.0}}) for run in range(5)]
    figures = ({"capacity_rps": 3.1, "low": 2.6, "high": 3.7, "low_rps": 2.6} if on == "rate" else
               {"capacity_concurrency": 6.4, "low": 5.2, "high": 7.9, "capacity_rps": 3.0, "low_rps": 2.5})
    return CapacityResult(slo={"e2e_ms_p95": 2000}, confidence=0.95, tolerance=0.25, requests_per_step=59, on=on,
                          repeats=5, runs=[2.8, 3.0, 3.1, 3.3, 3.4], straddles=[3.0], steps=steps,
                          output_tokens_per_s=300.0, input_tokens_per_request=800.0, output_tokens_per_request=100.0,
                          **figures)


def test_machines_are_planned_on_the_intervals_lower_bound_and_the_sentence_says_so() -> None:
    p = perf()
    p.capacity = interval_capacity()
    r = run_record("mid", "int8", [task_result("t", [1.0] * 9 + [0.0])], perf=p)
    policy = PolicyConfig(traffic_rps=10.0, cost_per_hour=1.0)
    cost = record_cost(r, policy)
    assert cost is not None and cost.planned_on == "lower bound" and cost.capacity_rps == 2.6
    assert cost.instances == 4  # ceil(10 / 2.6); the estimate 3.1 would have said 4 too, 2.6 vs 10/3 = 3.33 ...
    assert traffic_cost(3.1, 10.0, 1.0).instances == 4 and traffic_cost(2.4, 10.0, 1.0).instances == 5
    assert cost.per_million_input == pytest.approx(4 * 730 / (10 * 3600 * 730 * 800) * 1e6)
    assert cost.per_million_total == pytest.approx(4 * 730 / (10 * 3600 * 730 * 900) * 1e6)
    assert traffic_sentence(r, policy) == (
        "mid/int8 holds 3.1 req/s (95% interval 2.6-3.7) at p95 e2e <= 2 s on this machine; your 10 req/s needs "
        "4 of them on the lower bound, about $2,920 per month ($1.11 per million output tokens)")
    # Without a price the machines still follow from the lower bound.
    assert traffic_sentence(r, PolicyConfig(traffic_rps=30.0)).endswith("your 30 req/s needs 12 of them on the lower bound")


def test_a_concurrency_capacity_is_priced_at_the_requests_it_served() -> None:
    p = perf()
    p.capacity_concurrency = interval_capacity("concurrency")
    r = run_record("mid", "int8", [task_result("t", [1.0] * 9 + [0.0])], perf=p)
    cost = record_cost(r, PolicyConfig(traffic_rps=10.0, cost_per_hour=1.0))
    assert cost is not None and cost.capacity_rps == 2.5 and cost.instances == 4
    assert traffic_sentence(r, PolicyConfig(traffic_rps=10.0, cost_per_hour=1.0)).startswith(
        "mid/int8 holds 6.4 requests in flight (3 req/s; 95% interval 5.2-7.9 in flight) at p95 e2e <= 2 s")
    p.capacity = interval_capacity()  # both searched: the rate's plans the traffic
    assert record_cost(r, PolicyConfig(traffic_rps=10.0, cost_per_hour=1.0)).capacity_rps == 2.6  # type: ignore[union-attr]


def test_the_report_shows_the_interval_the_straddle_and_the_price_of_each_kind_of_token(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from selector.report import write_report
    from selector.trackers.naming import load_metrics, record_metrics

    p = perf()
    p.capacity, p.capacity_concurrency = interval_capacity(), interval_capacity("concurrency")
    r = run_record("mid", "int8", [task_result("t", [1.0] * 9 + [0.0])], perf=p)
    policy = PolicyConfig(floors={"t": 0.8}, traffic_rps=10.0, cost_per_hour=1.0)
    md = write_report([r], select([r], policy), {"experiment": "x"}, tmp_path)["md"].read_text()
    rate_row = next(line for line in md.splitlines() if line.startswith("| mid/int8 (by rate)"))
    assert "3.10 req/s" in rate_row and "2.60 – 3.70 (straddles the SLO at 3.00)" in rate_row
    assert "| 4 (at 2.60 req/s each) | $2,920 | $0.14 | $1.11 | $0.12 |" in rate_row
    conc_row = next(line for line in md.splitlines() if line.startswith("| mid/int8 (by concurrency)"))
    assert "**6.40 in flight** (3.00 req/s served)" in conc_row and "5.20 – 7.90" in conc_row
    assert "the capacity taken at its interval's lower bound" in md and "Student's t over the runs at 95%" in md
    assert "| mid/int8 | 3.00 req/s | 2 | no (combined runs: within) |" in md  # the run that broke the SLO
    m = record_metrics(r)
    assert m["capacity/low"] == 2.6 and m["capacity/high"] == 3.7 and m["capacity/runs"] == 5
    assert m["capacity/straddles"] == 1 and m["capacity_concurrency/concurrency"] == 6.4
    assert m["capacity_concurrency/low_rps"] == 2.5 and m["capacity/input_tokens_per_request"] == 800
    steps = load_metrics(r)
    assert ("capacity_probe/run", 2.0, 2) in steps and ("capacity_concurrency_probe/concurrency", 6.0, 0) in steps
    import io

    from rich.console import Console

    from selector.report import render_terminal_summary

    out = io.StringIO()
    Console(file=out, width=250).print(render_terminal_summary([r], select([r], policy)))
    assert "mid/int8 by rate" in out.getvalue() and "mid/int8 by concurrency" in out.getvalue()


def test_a_run_that_never_crossed_is_said_where_the_combined_runs_fail_below_the_estimate() -> None:
    from selector.report.capacity_view import held

    c = interval_capacity()
    c.failed_rps = 4.0
    assert held(c).sub == "fails at 4.00"
    c.failed_rps = 2.2  # one run failed at every rate it tried: the combined runs are over from 2.2
    assert held(c).sub == "runs combined: over from 2.20"


# ---- the confirmation run at the planned rate (measure.load.confirm_s) ----------------------------
SERVER_DIED = ("3 of 470 requests failed; the first: Server disconnected; the server exited with status 1 during "
               "the capacity search's confirmation run; last lines of /job/server.log:\nCUDA error: <out of memory>\n"
               "Traceback [most recent call last]")


def confirmation(held: bool, *, estimate: float | None = 1480.0, rise: float = 12.0, note: str = "",
                 errors: int = 0) -> CapacityConfirmation:
    """A 3-minute confirmation at interval_capacity's lower bound (2.6 req/s), after 30 s of warm-up."""
    level = LoadLevel(rate_rps=2.6, requests=470, errors=errors, duration_s=210.0, request_throughput=2.5,
                      output_tokens_per_s=250.0)
    return CapacityConfirmation(rate_rps=2.6, window_s=180.0, warmup_s=30.0, held=held, margin=-0.3 if held else 0.2,
                                checks={"e2e_ms_p95": {"estimate": estimate, "rise": rise, "limit": 2000.0}},
                                level=level, judged_requests=410, note=note)


def confirmed_record(trial: CapacityConfirmation | None):  # type: ignore[no-untyped-def]
    p = perf()
    p.capacity = interval_capacity()
    p.capacity.probe_s, p.capacity.warmup_s, p.capacity.confirmation = 30.0, 10.0, trial
    return run_record("mid", "int8", [task_result("t", [1.0] * 9 + [0.0])], perf=p)


def test_a_confirmation_that_held_is_said_beside_the_plan() -> None:
    policy = PolicyConfig(traffic_rps=10.0, cost_per_hour=1.0)
    assert traffic_sentence(confirmed_record(confirmation(True)), policy) == (
        "mid/int8 holds 3.1 req/s (95% interval 2.6-3.7) at p95 e2e <= 2 s on this machine (held p95 1.48 s for "
        "3 min at 2.6 req/s); your 10 req/s needs 4 of them on the lower bound, about $2,920 per month ($1.11 per "
        "million output tokens)")
    # Several limits: each figure is named.
    trial = confirmation(True, estimate=830.0)
    trial.checks["ttft_ms_p99"] = {"estimate": 120.0, "rise": 0.0, "limit": 500.0}
    assert "(held p95 e2e 830 ms and p99 ttft 120 ms for 3 min at 2.6 req/s); your 10 req/s needs 4" in \
        traffic_sentence(confirmed_record(trial), policy)  # type: ignore[operator]
    # No confirmation (confirm_s=0, or a record from before them): the sentence as it always was.
    assert traffic_sentence(confirmed_record(None), policy) == (
        "mid/int8 holds 3.1 req/s (95% interval 2.6-3.7) at p95 e2e <= 2 s on this machine; your 10 req/s needs "
        "4 of them on the lower bound, about $2,920 per month ($1.11 per million output tokens)")


def test_a_confirmation_that_did_not_hold_offers_no_machines_and_the_verdict_warns() -> None:
    policy = PolicyConfig(floors={"t": 0.8}, objective="cost_at_traffic", traffic_rps=10.0, cost_per_hour=1.0)
    r = confirmed_record(confirmation(False, estimate=2100.0, rise=340.0))
    sentence = traffic_sentence(r, policy)
    assert sentence == (
        "mid/int8 holds 3.1 req/s (95% interval 2.6-3.7) at p95 e2e <= 2 s on this machine, but not for 3 min at "
        "the planned 2.6 req/s (p95 2.1 s, rising 340 ms across the window, over the 2 s limit); the machines your "
        "10 req/s needs are not offered: the planned rate did not hold for 3 min on this machine")
    s = select([r], policy)
    assert s.summary.endswith(f" {sentence}.") and "$" not in s.summary
    assert "that meets every floor (ranked by a capacity its confirmation run did not hold) — " in s.summary
    (warning,) = [w for w in s.warnings if "did not hold" in w]
    assert warning == (
        "mid/int8's planned rate, 2.6 req/s, did not hold for 3 min on this machine (p95 2.1 s, rising 340 ms across "
        "the window, over the 2 s limit): no plan of machines is offered on it; re-run the capacity search, or plan "
        "below 2.6 req/s per machine. The ranking on cost at your traffic used that capacity all the same.")
    # A server that died during it: the first failure and the log's first line, not the whole tail.
    died = confirmed_record(confirmation(False, estimate=None, note=SERVER_DIED, errors=3))
    assert traffic_sentence(died, policy) == (
        "mid/int8 holds 3.1 req/s (95% interval 2.6-3.7) at p95 e2e <= 2 s on this machine, but not for 3 min at "
        "the planned 2.6 req/s (p95 fell on a failed request; 3 of 470 requests failed; the first: Server "
        "disconnected; the server exited with status 1 during the capacity search's confirmation run; last lines "
        "of /job/server.log); the machines your 10 req/s needs are not offered: the planned rate did not hold for "
        "3 min on this machine")
    # A held one warns of nothing.
    assert not [w for w in select([confirmed_record(confirmation(True))], policy).warnings if "did not hold" in w]


def test_mlflow_gets_the_confirmation_as_metrics_and_a_tag() -> None:
    from selector.trackers.naming import record_metrics, record_tags

    m = record_metrics(confirmed_record(confirmation(True)))
    assert m["capacity/confirm_held"] == 1.0 and m["capacity/confirm_rps"] == 2.6 and m["capacity/confirm_s"] == 180
    assert m["capacity/confirm_e2e_ms_p95"] == 1480 and m["capacity/confirm_e2e_ms_p95_rise"] == 12
    assert m["capacity/confirm_warmup_s"] == 30 and m["capacity/confirm_served_rps"] == 2.5
    assert m["capacity/confirm_judged_requests"] == 410 and m["capacity/confirm_errors"] == 0
    assert m["capacity/confirm_margin"] == -0.3 and record_tags(confirmed_record(confirmation(True)))[
        "selector.plan_confirmed"] == "held"
    died = confirmed_record(confirmation(False, estimate=None, note=SERVER_DIED, errors=3))
    m = record_metrics(died)
    assert m["capacity/confirm_held"] == 0.0 and "capacity/confirm_e2e_ms_p95" not in m  # fell on a failed request
    tags = record_tags(died)
    assert tags["selector.plan_confirmed"] == "did not hold" and tags["selector.plan_confirm_note"] == SERVER_DIED
    none = confirmed_record(None)
    assert not [k for k in record_metrics(none) if "confirm" in k]
    assert "selector.plan_confirmed" not in record_tags(none)
