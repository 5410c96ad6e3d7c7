"""`python -m selector compare A B`: two sweeps side by side, one change at a time.

A and B are sweep folders or MLflow parent run ids. Prints what differs in their resolved configs
and, per variant in both, how accuracy, latency, throughput and memory moved against their noise
(report.compare); writes compare.md and compare.json, and logs both to the later sweep's MLflow
parent run. A sweep run with `compare_to=<folder or run id>` carries the same in its report.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from selector.errors import UserError
from selector.report.compare import Side

RUN_ID = re.compile(r"^[0-9a-f]{32}$")


def main(argv: list[str]) -> int:
    """Compare two sweeps: what differs in their configs and how every variant in both moved."""
    parser = argparse.ArgumentParser(
        prog="python -m selector compare", description=main.__doc__,
        epilog="Examples:\n"
        "  python -m selector compare outputs/sweeps/2026-11-30_10-00-00 outputs/sweeps/2026-11-30_11-00-00\n"
        "  python -m selector compare <parent run id> <parent run id> --tracking-uri http://mlflow:5000\n",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", help="the earlier sweep: a sweep folder or an MLflow parent run id")
    parser.add_argument("b", help="the later sweep, the same way")
    parser.add_argument("--tracking-uri", help="MLflow store of run ids (default: the configured tracker's)")
    parser.add_argument("--out", type=Path, help="where to write compare.md and compare.json "
                                                 "(default: a compare-<A> folder in B's sweep folder)")
    parser.add_argument("--all", action="store_true", help="print every row, not only what moved beyond noise")
    args = parser.parse_args(argv)
    from selector.logs import setup_logging

    setup_logging()
    tracker = _lazy_tracker(args.tracking_uri)
    a, b = load_sweep(args.a, tracker), load_sweep(args.b, tracker)
    comparison = compare_sides(a, b)
    out = args.out or _default_out(a, b)
    paths = write_comparison(comparison, out)
    logged = log_comparison(comparison, a, b, paths)
    _print(comparison, show_all=args.all)
    print(f"\nComparison: {paths['md']}\n            {paths['json']}")
    if logged:
        print(f"MLflow: logged to run {logged} (artifacts under compare/)")
    return 0


def compare_sides(a: Side, b: Side) -> dict[str, Any]:
    from selector.report.compare import compare

    try:
        return compare(a, b)
    except ValueError as e:  # nothing in common: say what each side has
        raise UserError(f"compare: {e}") from None


def _lazy_tracker(uri: str | None) -> Callable[[], Any]:
    made: list[Any] = []

    def get() -> Any:
        if not made:
            from selector.compose import compose
            from selector.trackers import make_tracker

            defaults = compose([])
            defaults.tracker.kind = "mlflow"
            if uri:
                defaults.tracker.tracking_uri = uri
            made.append(make_tracker(defaults.tracker, defaults.experiment, defaults.output_dir))
        return made[0]

    return get


def load_sweep(source: str, tracker: Callable[[], Any]) -> Side:
    """A sweep folder (sweep.json and its jobs' record.json files) or an MLflow parent run id."""
    path = Path(source)
    if path.exists():
        return _folder(path, source)
    if not RUN_ID.match(source):
        raise UserError(f"compare: {source}: no such folder, and not an MLflow run id")
    t = tracker()
    if not hasattr(t, "client"):
        raise UserError(f"compare: {source}: no such folder; an MLflow run id needs tracker=mlflow")
    try:
        run = t.client.get_run(source)
    except Exception:
        raise UserError(f"compare: {source}: no such folder, and no MLflow run with this id in {t.uri}") from None
    records = t.load_records(source)
    if not records:
        raise UserError(f"compare: MLflow run {source} has no variant runs with records: not a sweep's parent run")
    config = t.load_sweep_config(source) or records[0].config
    return Side(source, records, config, source, t.uri, run.info.start_time / 1000 if run.info.start_time else None)


def _folder(path: Path, label: str) -> Side:
    from selector.sweep.end import gather_records
    from selector.sweep.state import read_state

    if not path.is_dir():
        raise UserError(f"compare: {label}: not a folder (a sweep folder holds sweep.json and its variants' records)")
    state = read_state(path)
    records = gather_records(path)
    if not state and not records:
        raise UserError(f"compare: {label}: not a sweep folder (no sweep.json and no record.json under it)")
    if not records:
        raise UserError(f"compare: {label}: a sweep folder without variant records (record.json): did it run?")
    config = state.get("config") or records[0].config
    return Side(label, records, config, state.get("parent_run_id"), state.get("tracking_uri", ""),
                state.get("started_at"))


def later(a: Side, b: Side) -> Side:
    """The sweep that started last (B when either time is unknown)."""
    if a.started_at is not None and b.started_at is not None and a.started_at > b.started_at:
        return a
    return b


def _default_out(a: Side, b: Side) -> Path:
    last, first = (b, a) if later(a, b) is b else (a, b)
    name = "compare-" + re.sub(r"[^\w.-]+", "_", Path(first.label).name)[:80]
    base = Path(last.label) if Path(last.label).is_dir() else Path("outputs") / "comparisons" / last.label
    return base / name


def write_comparison(comparison: dict[str, Any], out: Path) -> dict[str, Path]:
    from selector.report.render import render_comparison_markdown

    out.mkdir(parents=True, exist_ok=True)
    paths = {"md": out / "compare.md", "json": out / "compare.json"}
    paths["md"].write_text(render_comparison_markdown(comparison), encoding="utf-8")
    paths["json"].write_text(json.dumps(comparison, indent=2, default=str), encoding="utf-8")
    return paths


def log_comparison(comparison: dict[str, Any], a: Side, b: Side, paths: dict[str, Path]) -> str | None:
    """Attach the comparison to the later sweep's parent run; the run id, or None without one."""
    from selector.report.compare_view import headline
    from selector.trackers.comparison import log_comparison as log

    last, first = (b, a) if later(a, b) is b else (a, b)
    if not last.parent_run_id or not last.tracking_uri:
        return None
    tags = {"selector.compared_to": first.parent_run_id or first.label, "selector.comparison": headline(comparison)}
    return log(last.tracking_uri, last.parent_run_id, list(paths.values()), tags)


def _print(comparison: dict[str, Any], show_all: bool) -> None:
    from rich.console import Console
    from rich.table import Table as RichTable
    from rich.text import Text

    from selector.report.compare_view import changes_table, config_table, headline

    console = Console()
    console.print(Text(f"A: {comparison['a']['label']}\nB: {comparison['b']['label']}"))
    console.print(Text(headline(comparison), style="bold"))
    for title, table in (("What differs in the resolved configs", config_table(comparison)),
                         ("What moved" + ("" if show_all else " beyond noise (--all: every row)"),
                          changes_table(comparison, only_moved=not show_all))):
        rich = RichTable(title=title, title_justify="left", header_style="bold")
        for column in table.columns:
            rich.add_column(column)
        for row in table.rows:
            rich.add_row(*(Text(c.text, style="red" if "below" in c.kind else "") for c in row))
        console.print(rich)
    if comparison["only_a"] or comparison["only_b"]:
        console.print(Text(f"only in A: {', '.join(comparison['only_a']) or 'none'}; "
                           f"only in B: {', '.join(comparison['only_b']) or 'none'}"))
