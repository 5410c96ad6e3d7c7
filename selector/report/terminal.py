"""The end-of-sweep console summary (rich): the recommendation, warnings, and a compact variant table.

Every string goes in as rich Text, never as markup, so a variant name or an error message holding
'[bold]' or '[/]' prints literally.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table as RichTable
from rich.text import Text

from selector.report import fmt
from selector.report.console import print_fitted
from selector.selection.measures import PROCESS_PEAK, serving_peak
from selector.report.view import (
    best_throughput, ci_label, order_records, task_floor, task_names, verdict_status, verdicts_by_variant,
)
from selector.records import RunRecord, TaskResult
from selector.verdicts import Selection, SettingChoice, Verdict

VERDICT_STYLE = {"winner": "bold white on blue", "eligible": "green", "rejected": "dark_orange",
                 "stopped": "dark_orange", "failed": "bold red", "skipped": "dim", "not_needed": "dim"}


def _accuracy(result: TaskResult | None, verdict: Verdict | None) -> Text:
    """'95.0 [84–99]': percent with a rounded CI, red when the variant misses the floor."""
    if result is None:
        return Text(fmt.DASH, style="dim")
    result = fmt.decided(result, verdict)
    if not fmt.is_fraction(result):
        text = fmt.accuracy_ci(result)
    else:
        text = f"{result.value * 100:.1f} [{result.ci_low * 100:.0f}–{result.ci_high * 100:.0f}]"
    failed = verdict and any(c.name == f"accuracy:{result.task}" and not c.passed for c in verdict.checks)
    return Text(text, style="red" if failed else "")


def _first_reason(reasons: list[str]) -> Text:
    """The first reason only (the report has them all), so a row stays one line on a wide console."""
    more = f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else ""
    return Text((reasons[0] if reasons else "") + more, style="dim" if more else "")


def _serving(record: RunRecord) -> Text:
    """The serving peak the memory limit judges; an older record's process peak is marked *."""
    peak, kind = serving_peak(record)
    return Text(fmt.gigabytes(peak) + (" *" if kind == PROCESS_PEAK else ""))


def render_terminal_summary(records: list[RunRecord], selection: Selection) -> RenderableType:
    """A panel with the recommendation and warnings, above a compact variant table."""
    tasks = task_names(records, selection)
    verdicts = verdicts_by_variant(selection)
    floors = [f"{t} {fmt.pct(task_floor(selection, t), 0)}" for t in tasks if task_floor(selection, t) is not None]
    table = RichTable(title="Variants", title_justify="left", header_style="bold",
                      caption=(f"accuracy in % [{ci_label(selection)}]; floors: " + ", ".join(floors)) if floors else None,
                      caption_justify="left")
    table.add_column("variant", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for task in tasks:
        table.add_column(Text(task), justify="right", no_wrap=True)
    for header in ("weight GB", "serving GB", "e2e p50 ms", "tok/s"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("why not chosen", min_width=16)
    for r in order_records(records):
        verdict = verdicts.get(r.name)
        status = verdict_status(r, verdict)
        rank = f" #{verdict.rank}" if verdict and verdict.rank and status == "eligible" else ""
        lat = r.perf.latency if r.perf else None
        tput = best_throughput(r)
        reasons = verdict.reasons if verdict else ([r.reason] if r.reason else [])
        table.add_row(
            Text(r.name, style="bold" if status == "winner" else ""),
            Text(f" {status.replace('_', ' ')}{rank} ", style=VERDICT_STYLE.get(status, "")),
            *(_accuracy(r.tasks.get(t), verdict) for t in tasks),
            Text(fmt.gigabytes(r.memory.weight_bytes if r.memory else None)),
            _serving(r),
            Text(fmt.millis(lat.e2e_ms.p50 if lat else None)),
            Text(fmt.sig(tput[0]) if tput else fmt.DASH),
            _first_reason(reasons),
        )

    headline = Text()
    if selection.winner:
        headline.append("Recommended: ", style="bold")
        headline.append(selection.winner, style="bold blue")
    else:
        headline.append("No variant meets the policy.", style="bold red")
    body: list[RenderableType] = [headline, Text(selection.summary)]
    if selection.power_note:
        body.append(Text(selection.power_note, style="dim"))
    for warning in selection.warnings:
        body.append(Text(f"! {warning}", style="yellow"))
    panel = Panel(Group(*body), title="Recommendation", title_align="left", border_style="blue")
    load = _load_table(records, selection.settings)
    capacity = _capacity_table(records, selection)
    answers = _answers_table(records)
    return Group(panel, table, *(part for part in (capacity, load, answers) if part is not None))


def _answers_table(records: list[RunRecord]) -> RenderableType | None:
    """Answers under load, when some level changed an answer: per variant and level, the answers that
    differ from those at rest, each task's accuracy against the same items at rest, the level's p."""
    from selector.report.answers_view import answer_levels, probe_levels

    def moved(r: RunRecord) -> bool:
        return (any(a.changed for _, a in answer_levels(r))
                or any(lv.answers is not None and lv.answers.changed for lv in probe_levels(r)))

    changed = [r for r in order_records(records) if moved(r)]
    if not changed:
        return None
    table = RichTable(title="Answers under load (against the same variant at rest)", title_justify="left",
                      header_style="bold")
    for header in ("variant", "level", "changed", "accuracy under load vs at rest", "p (Holm)"):
        table.add_column(header, justify="right" if header in ("changed", "p (Holm)") else "left",
                         no_wrap=header != "accuracy under load vs at rest")
    for r in changed:
        for label, a in answer_levels(r):
            tasks = ", ".join(f"{task} {fmt.pct(t.value)} vs {fmt.pct(t.at_rest)}" for task, t in a.tasks.items()
                              if t.value is not None) or "not scored"
            table.add_row(Text(r.name), Text(label),
                          Text(f"{a.changed} of {a.compared}" + (f" ({a.share:.0%})" if a.share is not None else ""),
                               style="yellow" if a.changed else ""),
                          Text(tasks), Text(fmt.pvalue(a.p_value),
                                            style="red" if a.p_value is not None and a.p_value < 0.05 else ""))
        probes = probe_levels(r)
        if probes:
            total = sum(lv.answers.compared for lv in probes)  # type: ignore[union-attr]
            moved = sum(lv.answers.changed for lv in probes)  # type: ignore[union-attr]
            table.add_row(Text(r.name), Text(f"capacity probes ({len(probes)})"), Text(f"{moved} of {total}"),
                          Text("per probe in the report, the record and MLflow", style="dim"), Text(fmt.DASH))
    return table


def _capacity_table(records: list[RunRecord], selection: Selection) -> RenderableType | None:
    """The capacity at the SLO per variant (and the traffic's machines and cost), as the report has it."""
    from selector.report.capacity_view import capacity_table, confirmation_lines, policy_of

    found = capacity_table(records, policy_of(selection.policy))
    if found is None:
        return None
    table = RichTable(title="Capacity at the SLO", title_justify="left", header_style="bold")
    for i, header in enumerate(found.columns):
        table.add_column(header, justify="left" if i == 0 else "right", no_wrap=i > 0)
    for row in found.rows:  # the variant's cell says which search (by rate, by concurrency)
        table.add_row(*(Text(c.text + (f" {c.sub}" if i == 0 and c.sub else ""), style="red" if "below" in c.kind else "")
                        for i, c in enumerate(row)))
    confirmed = [Text(line, style="" if held else "red") for line, held in confirmation_lines(records)]
    return Group(table, *confirmed, Text(found.note, style="dim"))


def _load_table(records: list[RunRecord], settings: list[SettingChoice]) -> RenderableType | None:
    """Per variant and load level: throughput, e2e p95 and the layer its time goes to; below, each
    variant's diagnosis at its heaviest level (the report has every level's)."""
    from selector.engines.knobs import served_by
    from selector.measure.diagnosis import SHORT, Serving, diagnose_ladder, headline
    from selector.report.load_view import short_level, sorted_levels, with_load

    loaded = with_load(records)
    if not loaded:
        return None
    table = RichTable(title="Under load: where the time goes", title_justify="left", header_style="bold")
    table.add_column("variant")
    table.add_column("level", no_wrap=True)
    for header in ("req/s", "e2e p95", "goodput", "top share"):
        table.add_column(header, justify="right", no_wrap=True)
    lines: list[RenderableType] = []
    for r in loaded:
        levels = sorted_levels(r.perf.load)  # type: ignore[union-attr]
        serving = Serving(*served_by(r.config))
        for lv, d in zip(levels, diagnose_ladder(levels, serving)):
            top = max(d.shares, key=lambda k: d.shares[k]) if d.shares else None
            table.add_row(Text(r.name), Text(short_level(lv)), Text(fmt.sig(lv.request_throughput)),
                          Text(fmt.millis(lv.e2e_ms.p95 if lv.e2e_ms else None)),
                          Text(fmt.sig(lv.goodput_rps) if lv.goodput_rps is not None else fmt.DASH),
                          Text(f"{SHORT[top]} {d.shares[top]:.0%}" if top else "no split",
                               style="yellow" if top in ("queue", "batch_wait") and d.dominant else ""))
        worst = headline(levels, serving)
        if worst is not None:
            line = Text(f"{r.name}: ", style="bold")
            line.append(worst.text)
            lines.append(line)
    return Group(table, *lines, *(Text(f"Serving settings: {c.summary}", style="bold") for c in settings))


def print_terminal_summary(records: list[RunRecord], selection: Selection, *, console: Console | None = None,
                           report_paths: dict[str, Path] | None = None) -> None:
    """Print the summary (and where the report files are) to the console; in a log file or a pipe
    at the width its tables need, so no column is cut."""
    console = console or Console()
    print_fitted(console, render_terminal_summary(records, selection))
    for kind, path in (report_paths or {}).items():
        line = Text(f"{kind} report: ", style="dim")
        line.append(str(path))
        console.print(line)
