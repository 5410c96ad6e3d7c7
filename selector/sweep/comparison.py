"""Two sweeps compared (report.compare's tables; each side read by sweep.stored.load_side): write
compare.md / compare.json and attach them to the later sweep's MLflow parent run. `selector compare`
and a sweep's `compare_to=` both go through here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from selector.errors import UserError
from selector.report.compare import Side


def compare_sides(a: Side, b: Side) -> dict[str, Any]:
    from selector.report.compare import compare

    try:
        return compare(a, b)
    except ValueError as e:  # nothing in common: say what each side has
        raise UserError(f"compare: {e}") from None


def later(a: Side, b: Side) -> Side:
    """The sweep that started last (B when either time is unknown)."""
    if a.started_at is not None and b.started_at is not None and a.started_at > b.started_at:
        return a
    return b


def write_comparison(comparison: dict[str, Any], out: Path) -> dict[str, Path]:
    from selector.report.render import render_comparison_markdown

    out.mkdir(parents=True, exist_ok=True)
    paths = {"md": out / "compare.md", "json": out / "compare.json"}
    paths["md"].write_text(render_comparison_markdown(comparison), encoding="utf-8")
    paths["json"].write_text(json.dumps(comparison, indent=2, default=str), encoding="utf-8")
    return paths


def log_comparison(comparison: dict[str, Any], first: Side, last: Side, paths: dict[str, Path]) -> str | None:
    """Attach the comparison to the later sweep's parent run; the run id, or None without one."""
    from selector.report.compare_view import headline
    from selector.trackers.comparison import attach_to_run

    if not last.parent_run_id or not last.tracking_uri:
        return None
    tags = {"selector.compared_to": first.parent_run_id or first.label, "selector.comparison": headline(comparison)}
    return attach_to_run(last.tracking_uri, last.parent_run_id, list(paths.values()), tags)
