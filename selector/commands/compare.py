"""`python -m selector compare A B`: two sweeps side by side, one change at a time.

A and B are sweep folders or MLflow parent run ids. Prints what differs in their resolved configs
and, per variant in both, how accuracy, latency, throughput and memory moved against their noise
(selector.sweep.comparison); writes compare.md and compare.json, and logs both to the later sweep's MLflow
parent run. A sweep run with `compare_to=<folder or run id>` carries the same in its report.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from selector.errors import UserError
from selector.sweep.comparison import Side, compare_sides, later, load_side, log_comparison, write_comparison


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
    try:
        a, b = load_side(args.a, args.tracking_uri), load_side(args.b, args.tracking_uri)
    except UserError as e:
        raise UserError(f"compare: {e}") from None
    comparison = compare_sides(a, b)
    last = later(a, b)
    first = a if last is b else b
    paths = write_comparison(comparison, args.out or _default_out(first, last))
    logged = log_comparison(comparison, first, last, paths)
    _print(comparison, show_all=args.all)
    print(f"\nComparison: {paths['md']}\n            {paths['json']}")
    if logged:
        print(f"MLflow: logged to run {logged} (artifacts under compare/)")
    return 0


def _default_out(first: Side, last: Side) -> Path:
    name = "compare-" + re.sub(r"[^\w.-]+", "_", Path(first.label).name)[:80]
    base = Path(last.label) if Path(last.label).is_dir() else Path("outputs") / "comparisons" / last.label
    return base / name


def _print(comparison: dict[str, Any], show_all: bool) -> None:
    from rich.console import Console
    from rich.table import Table as RichTable
    from rich.text import Text

    from selector.report.compare_view import changes_table, config_table, headline
    from selector.report.console import print_fitted

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
        print_fitted(console, rich)
    if comparison["only_a"] or comparison["only_b"]:
        console.print(Text(f"only in A: {', '.join(comparison['only_a']) or 'none'}; "
                           f"only in B: {', '.join(comparison['only_b']) or 'none'}"))
