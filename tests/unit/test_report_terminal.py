"""The end-of-sweep console summary."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from selector.report import print_terminal_summary, render_terminal_summary
from tests.fixtures.sample_report import sample_sweep


def _render(width: int = 220, **kwargs) -> str:  # type: ignore[no-untyped-def]
    records, selection, _ = sample_sweep(inject=" [bold red]not markup[/] <script>")
    console = Console(width=width, record=True, color_system=None)
    if kwargs:
        print_terminal_summary(records, selection, console=console, **kwargs)
    else:
        console.print(render_terminal_summary(records, selection))
    return console.export_text()


def test_summary_names_the_winner_and_every_variant() -> None:
    records, selection, _ = sample_sweep()
    text = _render()
    assert f"Recommended: {selection.winner}" in text
    assert selection.summary.split(":")[0] in text
    lines = {r.name: next(line for line in text.splitlines() if line.startswith(f"│ {r.name} ")) for r in records}
    winner = lines[selection.winner]  # type: ignore[index]
    assert "winner" in winner and "1.28" in winner  # weight GB of the sample's winner
    assert "eligible #2" in lines["qwen2.5-coder-1.5b/int8"]
    assert "skipped" in lines["gemma3-270m/fp8"] and "failed" in lines["qwen2.5-coder-1.5b/awq-w4"]
    # Percent with a rounded CI, and only the first reason plus a count.
    extraction = next(r for r in records if r.name == "smollm2-135m/bf16").tasks["extraction"]
    expected = f"{extraction.value * 100:.1f} [{extraction.ci_low * 100:.0f}–{extraction.ci_high * 100:.0f}]"
    assert expected == "47.5 [33–63]" and expected in lines["smollm2-135m/bf16"]
    assert "(+1 more)" in lines["smollm2-135m/bf16"]
    assert "floors: sentiment 80%, extraction 70%, arithmetic 60%" in text


def test_rich_markup_in_messages_prints_literally() -> None:
    text = _render(width=400)  # wide enough that nothing wraps
    assert text.count("[bold red]not markup[/] <script>") == 2  # the warning and the failed variant's reason


def test_print_lists_report_paths() -> None:
    text = _render(report_paths={"html": Path("out") / "report.html"})
    assert f"html report: {Path('out') / 'report.html'}" in text
