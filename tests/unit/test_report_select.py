"""The report renders what the real select() produces (the two halves agree on the Selection contract)."""

from __future__ import annotations

from pathlib import Path

from selector.config import PolicyConfig
from selector.report import write_report
from tests.fixtures.sample_report import FLOORS, sample_sweep
from selector.selection import select


def test_report_from_real_selection(tmp_path: Path) -> None:
    records, _, context = sample_sweep()
    selection = select(records, PolicyConfig(floors=dict(FLOORS)), n_resamples=200)
    assert selection.winner is not None
    html = write_report(records, selection, context, tmp_path)["html"].read_text()
    variants = html[html.index('id="variants"'):html.index('</section>', html.index('id="variants"'))]
    assert variants.count("<tr") == len(records) + 1
    winner_row = variants[variants.index('class="winner-row"'):]
    assert winner_row[:winner_row.index("</tr>")].count(selection.winner) == 1
    for verdict in selection.verdicts:
        for reason in verdict.reasons:
            assert reason.replace("<", "&lt;").replace(">", "&gt;") in variants
    # Every figure the data supports, and the selection's statistics sections.
    for section in ('id="plot-accuracy"', 'id="plot-memory"', 'id="plot-latency"', 'id="plot-load-latency"',
                    'id="sensitivity"', 'id="sample-size"', 'id="paired"'):
        assert section in html, section
    md = (tmp_path / "report.md").read_text()
    assert selection.winner in md.split("## All variants")[0]
