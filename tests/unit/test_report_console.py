"""The console summary where stdout is not a terminal (a log file, CI, `| tee`): rich assumes 80
columns there and cut every column that did not fit ("verd…", "sent…"); the tables are now printed
at the width their content needs. On a terminal rich still fits them to the window."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from selector.config import PolicyConfig
from selector.records import CapacityResult, CapacityStep, LoadLevel
from selector.report import print_terminal_summary
from selector.report.capacity_view import capacity_table, policy_of
from selector.report.console import print_fitted, widest_table
from selector.selection import select
from tests.factories import perf, run_record, task_result

TASKS = ("sentiment", "extraction", "arithmetic", "code")


def capacity(rps: float) -> CapacityResult:
    level = LoadLevel(rate_rps=rps, requests=59, errors=0, duration_s=10.0, request_throughput=rps,
                      output_tokens_per_s=rps * 100, cpu_util_pct=70.0)
    step = CapacityStep(rate_rps=rps, passed=True, level=level,
                        checks={"e2e_ms_p95": {"estimate": 1000.0, "upper": 1500.0, "limit": 4000.0}})
    return CapacityResult(slo={"e2e_ms_p95": 4000}, confidence=0.95, tolerance=0.1, requests_per_step=59,
                          capacity_rps=rps, steps=[step], output_tokens_per_s=level.output_tokens_per_s,
                          cpu_util_pct=level.cpu_util_pct)


def records_and_selection():  # type: ignore[no-untyped-def]
    """Three variants of a four-task eval set, each with a capacity at the SLO: wider than 80 columns."""
    records = []
    for name, weight_gb, right, rps in (("qwen2.5-coder-1.5b", 3.5, 9, 1.2), ("gemma3-270m", 0.5, 4, 3.1),
                                        ("smollm2-135m", 0.3, 2, 5.0)):
        p = perf()
        p.capacity = capacity(rps)
        records.append(run_record(name, "gptq-int4", [task_result(t, [1.0] * right + [0.0] * (10 - right))
                                                      for t in TASKS], weight_bytes=int(weight_gb * 1e9), perf=p))
    policy = PolicyConfig(floors={t: 0.6 for t in TASKS}, objective="cost_at_traffic", traffic_rps=20.0,
                          cost_per_hour=2.0)
    return records, select(records, policy)


def test_a_log_gets_every_column_whole() -> None:
    records, selection = records_and_selection()
    out = io.StringIO()
    console = Console(file=out)  # a file: not a terminal, so rich's width is 80
    assert not console.is_terminal and console.width == 80
    print_terminal_summary(records, selection, console=console)
    text = out.getvalue()
    assert "…" not in text  # nothing cut
    lines = text.splitlines()
    header = next(line for line in lines if "verdict" in line and "variant" in line)
    for column in ("weight GB", "serving GB", "e2e p50 ms", "tok/s", *TASKS):
        assert column in header
    assert "why not chosen" in header
    rows = {r.name: next(line for line in lines if line.startswith(f"│ {r.name}")) for r in records}
    winner = rows["qwen2.5-coder-1.5b/gptq-int4"]
    assert " winner " in winner and "90.0 [55–100]" in winner
    assert " rejected " in rows["gemma3-270m/gptq-int4"] and " rejected " in rows["smollm2-135m/gptq-int4"]
    assert "arithmetic: 20.0% < floor 60.0% (40.0 points short)" in rows["smollm2-135m/gptq-int4"]
    found = capacity_table(records, policy_of(selection.policy))
    assert found is not None
    capacity_header = next(line for line in lines if "capacity" in line and "instances" in line)
    assert all(column in capacity_header for column in found.columns)
    assert "$24,820" in next(line for line in lines if line.startswith("│ qwen") and "$" in line)  # its cost row
    # The console is left as it was given.
    assert console.width == 80


def test_a_terminal_keeps_its_width() -> None:
    records, selection = records_and_selection()
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80, color_system=None)
    print_terminal_summary(records, selection, console=console)
    assert max(len(line) for line in out.getvalue().splitlines()) <= 80


def test_widest_table_looks_inside_groups_and_panels() -> None:
    from rich.console import Group
    from rich.panel import Panel

    table = Table("a", "b")
    table.add_row("x" * 100, "y" * 20)
    console = Console(file=io.StringIO())
    alone = widest_table(console, table)
    assert alone == 100 + 20 + 7  # cells, one column of padding each side, three borders
    assert widest_table(console, Group("prose " * 50, Panel(table))) == alone + 4
    assert widest_table(console, "only prose " * 50) == 0
    out = io.StringIO()
    print_fitted(Console(file=out), Group("a short line", table))
    assert "x" * 100 in out.getvalue() and "y" * 20 in out.getvalue()
