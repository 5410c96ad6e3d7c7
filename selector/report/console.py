"""Printing rich tables so that a log can be read. On a terminal rich fits a table to the window;
where stdout is not a terminal (a log file, CI, `| tee`) rich assumes 80 columns and cuts every
column that does not fit ("verd…", "sent…"). There a table is printed at the width its content
needs instead, so every column keeps its header and its values; prose around it still wraps."""

from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.panel import Panel
from rich.table import Table

UNBOUNDED = 10_000  # columns to measure a table in: wider than any table's content


def print_fitted(console: Console, renderable: RenderableType) -> None:
    """`console.print(renderable)`, widened to its widest table when the console is not a terminal."""
    needed = widest_table(console, renderable)
    if console.is_terminal or needed <= console.width:
        console.print(renderable)
        return
    width = console.width
    console.width = needed
    try:
        console.print(renderable)
    finally:
        console.width = width


def widest_table(console: Console, renderable: RenderableType) -> int:
    """Columns the widest table in `renderable` (a table, or groups and panels holding tables) needs
    to show every cell on one line; 0 when there is no table."""
    if isinstance(renderable, Table):
        options = console.options.update(max_width=UNBOUNDED)
        return Measurement.get(console, options, renderable).maximum
    if isinstance(renderable, Group):
        return max((widest_table(console, r) for r in renderable.renderables), default=0)
    if isinstance(renderable, Panel):
        inner = widest_table(console, renderable.renderable)
        return inner + 4 if inner else 0  # its two borders and one column of padding on each side
    return 0
