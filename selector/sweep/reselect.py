"""A stored sweep selected again (selector.sweep.stored reads it): the selection under a policy and,
when asked, a new report, with the comparison its config names (compare_to).

`selector select` and the Python API (SweepResult.select) both go through here.
"""

from __future__ import annotations

from pathlib import Path

from selector.config import SelectorConfig
from selector.sweep.stored import StoredSweep
from selector.verdicts import Selection


def select_again(stored: StoredSweep, cfg: SelectorConfig, out: Path | None) -> tuple[Selection, dict[str, Path]]:
    """The selection under cfg.policy and, when `out` is given, a new report there."""
    from selector.report.samples import load_samples
    from selector.selection import select
    from selector.sweep.judging import report_context, select_and_report

    if out is None:
        return select(stored.records, cfg.policy), {}
    samples = load_samples(stored.base) if stored.folder else None  # the outputs the report shows
    context = report_context(cfg, stored.state, stored.base, 0.0)
    if cfg.compare_to:  # the sweep named a predecessor: the new report compares with it too
        from selector.sweep.comparison import Side, compare_with_predecessor

        context["comparison"] = compare_with_predecessor(cfg, Side(stored.source, stored.records, stored.config or {},
                                                                   stored.state.parent_run_id,
                                                                   started_at=stored.state.started_at))
    return select_and_report(stored.records, cfg, context, out, samples)
