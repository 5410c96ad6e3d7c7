"""The report's load section, settings comparison and sweep comparison, rendered from hand-built
records whose names carry markup: the figures land in the right cells, and nothing a config or a
model name holds becomes markup in HTML, Markdown or the console."""

from __future__ import annotations

import io
import re
from pathlib import Path

from rich.console import Console

from selector.config import PolicyConfig
from selector.report import render_terminal_summary, write_report
from selector.sweep.comparison import Side, compare_sweeps
from selector.report.render import render_comparison_markdown
from selector.selection import select
from selector.records import LoadLevel, MemoryResult, Percentiles, PerfResult, RunRecord, TaskResult, Variant

NAME = "<b>m</b>|x"  # a model name a user chose, with HTML and a Markdown table break


def pct(p50: float, p95: float) -> Percentiles:
    return Percentiles(p50=p50, p90=p95, p95=p95, p99=p95 * 1.02, mean=p50, n=8)


def record(size: int, queue: float, compute: float, goodput: float) -> RunRecord:
    e2e = queue + compute
    levels = [LoadLevel(concurrency=c, requests=8, errors=0, duration_s=4.0, request_throughput=2.0,
                        output_tokens_per_s=16.0, ttft_ms=pct(e2e * 0.8, e2e), e2e_ms=pct(e2e, e2e * 1.1),
                        queue_ms=pct(queue * (c > 1), queue * (c > 1)), batch_wait_ms=pct(0.1, 0.2),
                        compute_ms=pct(compute, compute), goodput_rps=goodput, split_source="scheduler",
                        tail_ms={"e2e_ms": e2e, "queue_ms": queue * (c > 1), "batch_wait_ms": 0.0,
                                 "compute_ms": compute + queue * (c == 1), "n": 1})
              for c in (1, 8)]
    scores = {f"i{i}": 1.0 for i in range(10)}
    return RunRecord(key=f"k{size}", variant=Variant(model=NAME, precision="bf16", setting={"max_batch_size": size}),
                     status="completed",
                     tasks={"t": TaskResult(task="t", metric="accuracy", value=1.0, ci_low=0.7, ci_high=1.0, n=10,
                                            item_scores=scores)},
                     perf=PerfResult(device="cpu", load=levels), memory=MemoryResult(weight_bytes=10**8),
                     config={"engine": {"kind": "hf"},
                             "measure": {"load": {"max_batch_size": size, "slo": {"e2e_ms": 9}}}})


def test_load_section_renders_escaped_in_html_markdown_and_console(tmp_path: Path) -> None:
    records = [record(1, 710, 290, 0.5), record(8, 0, 400, 1.5)]
    selection = select(records, PolicyConfig())
    paths = write_report(records, selection, {"experiment": "x"}, tmp_path)
    html, md = paths["html"].read_text(), paths["md"].read_text()
    assert "<b>m</b>" not in html and "&lt;b&gt;m&lt;/b&gt;|x/bf16 [max_batch_size=1]" in html
    section = md[md.index("## Under load"):]
    assert "<b>" not in section
    escaped = r"&lt;b&gt;m&lt;/b&gt;\|x/bf16 \[max_batch_size=1\]"
    assert f"- {escaped}: at concurrency 8, 71% of e2e p95 is queueing: raise max_batch_size (now 1, below the 8 " \
           "requests in flight) or add an instance" in section
    split = [line for line in section.splitlines() if line.startswith(f"| {escaped} | c=8 | 1,100 |")]
    assert split and "| **71%** (p95 710 ms) | 0% (p95 0.200 ms) | 29% (p95 290 ms) | per request |" in split[0]
    widths = {len(re.findall(r"(?<!\\)\|", line)) for line in section.splitlines() if line.startswith("| ")
              and "max_batch_size=" in line and "c=" in line}
    assert len(widths) == 2  # the levels table and the split table, each row whole despite the name's '|'
    assert r"\|x/bf16: max_batch_size=8 has the highest goodput, 1.5 req/s within the SLO at concurrency 8" in section
    assert 'id="plot-settings"' in html
    out = io.StringIO()
    Console(file=out, width=200).print(render_terminal_summary(records, selection))
    text = out.getvalue()
    assert f"{NAME}/bf16 [max_batch_size=1]: at concurrency 8, 71% of e2e p95 is queueing" in text
    assert "Serving settings: <b>m</b>|x/bf16: max_batch_size=8 has the highest goodput" in text


def test_comparison_markdown_escapes_names_and_values() -> None:
    a = Side("A", [record(1, 710, 290, 0.5)], {"seed": 0, "experiment": "<i>e</i>"})
    b = Side("B", [record(1, 700, 250, 0.5)], {"seed": 0, "experiment": "<i>f</i>|g"})
    md = render_comparison_markdown(compare_sweeps(a, b))
    assert "<i>" not in md and "<b>" not in md
    assert r"| experiment | &lt;i&gt;e&lt;/i&gt; | &lt;i&gt;f&lt;/i&gt;\|g |" in md


def test_a_servers_prefix_cache_hit_rate_is_a_column_of_every_level(tmp_path: Path) -> None:
    from selector.trackers.naming import load_metrics

    records = [record(1, 710, 290, 0.5)]
    md = write_report(records, select(records, PolicyConfig()), {"experiment": "x"}, tmp_path)["md"].read_text()
    assert "prefix cache" not in md  # in-process: no prefix cache figures, no column
    for level, rate in zip(records[0].perf.load, (0.25, None)):  # type: ignore[union-attr]
        level.prefix_cache_hit_rate = rate
    md = write_report(records, select(records, PolicyConfig()), {"experiment": "x"}, tmp_path)["md"].read_text()
    rows = [line for line in md.splitlines() if line.startswith("| &lt;b&gt;") and "| c=" in line and "goodput" not in line]
    assert any(line.rstrip().endswith("| 25% |") for line in rows) and any(line.rstrip().endswith("| — |") for line in rows)
    assert "share of the level's prompt tokens the server found in its prefix cache" in md
    assert ("load/prefix_cache_hit_rate", 0.25, 1) in load_metrics(records[0])
