"""The report's capacity section with the confirmation run at the planned rate
(measure.load.confirm_s): its own table in HTML and Markdown, the plan's cells when it did not
hold, a line in the console, and the probe's description for steady-state and older records."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from selector.config import PolicyConfig
from selector.report import render_terminal_summary, write_report
from selector.selection import select
from tests.factories import perf, run_record, task_result
from tests.unit.test_selection_cost import SERVER_DIED, confirmation, interval_capacity

NAME = "<b>m</b>|x"  # a model name with HTML and a Markdown table break
POLICY = PolicyConfig(floors={"t": 0.8}, traffic_rps=10.0, cost_per_hour=1.0)


def records():  # type: ignore[no-untyped-def]
    """Two variants of steady-state searches: one whose confirmation held, one whose server died in it."""
    out = []
    for precision, weight, trial in (("bf16", 2 * 10**9, confirmation(True)),
                                     ("int8", 10**9, confirmation(False, estimate=None, note=SERVER_DIED, errors=3))):
        p = perf()
        p.capacity = interval_capacity()
        p.capacity.probe_s, p.capacity.warmup_s, p.capacity.confirmation = 30.0, 10.0, trial
        out.append(run_record(NAME, precision, [task_result("t", [1.0] * 9 + [0.0])], weight_bytes=weight, perf=p))
    return out


def test_the_confirmation_renders_escaped_in_html_markdown_and_console(tmp_path: Path) -> None:
    rs = records()
    selection = select(rs, POLICY)
    paths = write_report(rs, selection, {"experiment": "x"}, tmp_path)
    html, md = paths["html"].read_text(), paths["md"].read_text()
    section = md[md.index("### The plan, confirmed"):md.index("### Latency against load")]
    name = r"&lt;b&gt;m&lt;/b&gt;\|x"
    held = next(line for line in section.splitlines() if line.startswith(f"| {name}/bf16 (by rate)"))
    assert held == (f"| {name}/bf16 (by rate) | 2.60 req/s | 3 min (after 30 s of warm-up; 410 requests judged) | "
                    "2.50 | e2e_ms_p95 1,480 (rise 12.0) / 2,000 | yes | 0 of 470 | — |")
    died = next(line for line in section.splitlines() if line.startswith(f"| {name}/int8 (by rate)"))
    assert "| e2e_ms_p95 inf / 2,000 (over: e2e_ms_p95) | no | 3 of 470 |" in died
    # The whole note, log tail and all, escaped: no markup, no table break, no line break.
    assert ("the server exited with status 1 during the capacity search's confirmation run; last lines of "
            r"/job/server.log: CUDA error: &lt;out of memory&gt; Traceback \[most recent call last\] |") in died
    # The winner (the smaller weights) is the one whose plan did not hold: no machines, and a warning.
    assert "the machines your 10 req/s needs are not offered: the planned rate did not hold for 3 min on this " \
           "machine." in md and "no plan of machines is offered on it" in md
    # The plan's cells: the held variant's machines and money, the other's not offered.
    capacity = md[md.index("### Capacity at the SLO"):md.index("### The plan, confirmed")].splitlines()
    rows = {p: next(line for line in capacity if line.startswith(f"| {name}/{p} (by rate)")) for p in ("bf16", "int8")}
    assert "| 4 (at 2.60 req/s each) | $2,920 |" in rows["bf16"]
    assert "| not offered (2.60 req/s did not hold) | — | — | — | — |" in rows["int8"]
    # The probes: a steady-state window after a warm-up.
    assert ("at which a probe meets p95 e2e &lt;= 2 s" in md and "Each probe sends for 10 s of warm-up plus a 30 s "
            "judged window (at least 59 requests judged)") in md
    assert "<b>m</b>" not in html and "CUDA error: &lt;out of memory&gt;" in html and 'id="load-confirmation"' in html
    out = io.StringIO()
    Console(file=out, width=400).print(render_terminal_summary(rs, selection))
    text = out.getvalue()
    assert f"{NAME}/bf16 by rate, confirmation run: held p95 1.48 s for 3 min at 2.6 req/s" in text
    assert (f"{NAME}/int8 by rate, confirmation run: did not hold for 3 min at 2.6 req/s (p95 fell on a failed "
            "request; 3 of 470 requests failed; the first: Server disconnected; the server exited with status 1 "
            "during the capacity search's confirmation run; last lines of /job/server.log); the plan is not "
            "offered") in text
    assert "CUDA error" not in text  # the console keeps to the first line; the report has the tail


def test_a_record_from_before_steady_state_probes_and_confirmations_reads_as_it_did(tmp_path: Path) -> None:
    p = perf()
    p.capacity = interval_capacity()  # probe_s, warmup_s and confirmation all None
    r = run_record("old", "bf16", [task_result("t", [1.0] * 9 + [0.0])], perf=p)
    md = write_report([r], select([r], POLICY), {"experiment": "x"}, tmp_path)["md"].read_text()
    assert "at which a run of 59 requests meets p95 e2e &lt;= 2 s" in md
    assert "Each probe sends" not in md and "### The plan, confirmed" not in md and "not offered" not in md
