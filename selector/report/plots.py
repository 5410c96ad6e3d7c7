"""Report figures as inline SVG strings (matplotlib, no pyplot state, no display needed).

Colour encodes the model and the marker the precision, from the Okabe-Ito palette, which stays
distinguishable under the common colour-vision deficiencies. Every plot returns None when its data
is absent, so a sweep without load tests simply has fewer figures.

Figures are built as bare `Figure` objects and written by matplotlib's SVG backend: pyplot and
its global backend are never touched, so importing this module in a notebook changes nothing there
and no display is needed.
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass

import matplotlib
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from selector.report import fmt
from selector.report.view import ci_label, mean_accuracy, order_records, task_floor, task_names
from selector.selection import pareto_front
from selector.records import RunRecord
from selector.verdicts import Selection

OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000", "#F0E442"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
STYLE = {
    "svg.fonttype": "none",  # text stays text: smaller files, selectable, and escaped by the writer
    "font.family": "sans-serif",
    "font.size": 9.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#e3e6ea",
    "grid.linewidth": 0.8,
    "axes.edgecolor": "#9aa3ad",
    "axes.titlesize": 10.5,
    "axes.titleweight": "bold",
    "legend.frameon": False,
}


@dataclass(frozen=True)
class Plot:
    id: str
    title: str
    caption: str
    svg: str


def _text(s: str) -> str:
    """A label matplotlib prints literally: '$' would otherwise start mathtext."""
    return s.replace("\\", "\\\\").replace("$", r"\$")


class Encoding:
    """Colour per model, marker per precision, stable across all plots of one report."""

    def __init__(self, records: list[RunRecord]) -> None:
        ordered = order_records(records)
        models = list(dict.fromkeys(r.variant.model for r in ordered))
        precisions = list(dict.fromkeys(r.variant.precision for r in ordered))
        self.colour = {m: OKABE_ITO[i % len(OKABE_ITO)] for i, m in enumerate(models)}
        self.marker = {p: MARKERS[i % len(MARKERS)] for i, p in enumerate(precisions)}

    def legend(self, ax, records: list[RunRecord], **kw) -> None:  # type: ignore[no-untyped-def]
        models = dict.fromkeys(r.variant.model for r in order_records(records))
        precs = dict.fromkeys(r.variant.precision for r in order_records(records))
        handles = [Line2D([], [], color=self.colour[m], marker="o", ls="", label=_text(m)) for m in models]
        handles += [Line2D([], [], color="#555", marker=self.marker[p], ls="", mfc="none", label=_text(p))
                    for p in precs]
        ax.legend(handles=handles, fontsize=8.5, **kw)


def _svg(fig: Figure, plot_id: str, title: str) -> str:
    buf = io.StringIO()
    with matplotlib.rc_context({**STYLE, "svg.hashsalt": plot_id}):  # fixed salt: the same data, the same file
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]  # drop the XML declaration and DOCTYPE: not allowed inline
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    # Several SVGs share one page: matplotlib names its groups figure_1, axes_1... in each, so
    # prefix every id and every reference to one with the plot's own id.
    svg = re.sub(r'\bid="([^"]+)"', rf'id="{plot_id}-\1"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", rf"url(#{plot_id}-\1)", svg)
    svg = re.sub(r'href="#([^"]+)"', rf'href="#{plot_id}-\1"', svg)
    label = title.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
    return svg.replace("<svg ", f'<svg role="img" aria-label="{label}" ', 1)


def _percent_axis(axis) -> None:  # type: ignore[no-untyped-def]
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v * 100:.0f}%"))


def plain_log_axis(axis) -> None:  # type: ignore[no-untyped-def]
    """Log scale ticked at 1-2-5 steps with plain numbers ('0.2', '1,000'), not powers of ten."""
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def accuracy_by_task(records: list[RunRecord], selection: Selection) -> Plot | None:
    """One panel per task: each variant's accuracy with its CI, and the floor."""
    done = [r for r in order_records(records) if r.status == "completed" and r.tasks]
    tasks = task_names(done, selection)
    if not done or not tasks:
        return None
    enc = Encoding(done)
    cols = min(3, len(tasks))
    rows = -(-len(tasks) // cols)
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(3.4 * cols + 2.2, rows * (0.26 * len(done) + 1.1)), layout="constrained")
        axes = fig.subplots(rows, cols, sharey=True, squeeze=False).ravel()
        labels = [_text(r.name) + (" ★" if r.name == selection.winner else "") for r in done]
        verdicts = {v.variant: v for v in selection.verdicts}
        for ax, task in zip(axes, tasks):
            for y, r in enumerate(done):
                t = r.tasks.get(task)
                if t is None:
                    continue
                t = fmt.decided(t, verdicts.get(r.name))
                ax.errorbar(t.value, y, xerr=[[max(0.0, t.value - t.ci_low)], [max(0.0, t.ci_high - t.value)]], fmt=enc.marker[
                    r.variant.precision], color=enc.colour[r.variant.model], ms=6, capsize=2.5, lw=1.4)
            floor = task_floor(selection, task)
            if floor is not None:
                ax.axvline(floor, color="#C0392B", ls="--", lw=1.1)
            ax.set_title(_text(task) + (f"  (floor {floor:.0%})" if floor is not None else ""))
            ax.set_yticks(range(len(done)), labels)
            for tick, r in zip(ax.get_yticklabels(), done):
                if r.name == selection.winner:
                    tick.set_fontweight("bold")
            ax.set_ylim(len(done) - 0.5, -0.5)
            ax.grid(axis="y", visible=False)
            if all(0 <= r.tasks[task].ci_high <= 1 for r in done if task in r.tasks):
                ax.set_xlim(-0.02, 1.02)
                _percent_axis(ax.xaxis)
        for ax in axes[len(tasks):]:
            ax.set_visible(False)
        fig.supxlabel(f"accuracy ({ci_label(selection)})", fontsize=9)
    title = "Accuracy per task"
    return Plot("plot-accuracy", title, f"Each variant's accuracy per task with its {ci_label(selection)}; "
                "the dashed line is the policy's floor; ★ marks the recommendation.",
                _svg(fig, "plot-accuracy", title))


def _scores(done: list[RunRecord], selection: Selection, tasks: list[str]) -> dict[str, float | None]:
    """The score the selection ranked on (weighted, else mean); the plain mean where it gave none."""
    verdicts = {v.variant: v for v in selection.verdicts}
    out: dict[str, float | None] = {}
    for r in done:
        given = verdicts[r.name].scores if r.name in verdicts else {}
        out[r.name] = given.get("weighted", given.get("mean", mean_accuracy(r, tasks)))
    return out


def _front_for(selection: Selection, words: tuple[str, ...]) -> list[str] | None:
    """The selection's own front for an axis whose name contains one of `words`."""
    for axis, names in selection.pareto.items():
        if any(w in axis.lower() for w in words):
            return names
    return None


def _tradeoff(records: list[RunRecord], selection: Selection, *, plot_id: str, title: str, xlabel: str,
              x_of, words: tuple[str, ...]) -> Plot | None:  # type: ignore[no-untyped-def]
    done = [r for r in order_records(records) if r.status == "completed"]
    tasks = task_names(done, selection)
    scores = _scores(done, selection, tasks)
    weighted = any("weighted" in v.scores for v in selection.verdicts)
    points = {r.name: (x_of(r), scores.get(r.name)) for r in done}
    points = {n: (x, y) for n, (x, y) in points.items() if x is not None and y is not None and x > 0}
    if len(points) < 2:
        return None
    front = _front_for(selection, words)
    source = "as computed by the selection (over every task)"
    if front is None:
        front, source = pareto_front({n: (y, x) for n, (x, y) in points.items()}), "over the accuracy shown"
    front = [n for n in front if n in points]
    by_name = {r.name: r for r in done}
    enc = Encoding([by_name[n] for n in points])
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(8.6, 4.6), layout="constrained")
        ax = fig.subplots()
        fx = sorted(front, key=lambda n: points[n][0])
        if fx:  # a staircase: what the best variant at or below each cost achieves
            ax.plot([points[n][0] for n in fx], [points[n][1] for n in fx], color="#7f8c8d", lw=1.2,
                    drawstyle="steps-post", zorder=1)
        for name, (x, y) in points.items():
            r = by_name[name]
            on = name in front
            ax.scatter(x, y, s=80 if on else 42, marker=enc.marker[r.variant.precision],
                       color=enc.colour[r.variant.model], edgecolors="#111" if on else "none",
                       linewidths=1.3, zorder=3)
            if name == selection.winner:  # other points are told apart by colour (model) and marker
                right_half = x > math.sqrt(min(p[0] for p in points.values()) * max(p[0] for p in points.values()))
                ax.annotate(_text(name) + " ★", (x, y), fontsize=8, fontweight="bold", color="#222",
                            xytext=(-14 if right_half else 14, -22), textcoords="offset points",
                            ha="right" if right_half else "left", va="top",
                            arrowprops={"arrowstyle": "-", "color": "#555", "lw": 0.8})
        ax.set_xscale("log")
        plain_log_axis(ax.xaxis)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("weighted accuracy" if weighted else
                      f"mean accuracy over {len(tasks)} task{'s' if len(tasks) != 1 else ''}")
        _percent_axis(ax.yaxis)
        enc.legend(ax, [by_name[n] for n in points], loc="center left", bbox_to_anchor=(1.01, 0.5))
    caption = (f"Outlined points are on the Pareto front ({source}): no other variant is both cheaper and "
               "more accurate. Colour: model; marker: precision; ★ marks the recommendation.")
    return Plot(plot_id, title, caption, _svg(fig, plot_id, title))


def accuracy_vs_memory(records: list[RunRecord], selection: Selection) -> Plot | None:
    return _tradeoff(records, selection, plot_id="plot-memory", title="Accuracy vs weight memory",
                     xlabel="weight memory (GB, log scale)", words=("mem", "weight"),
                     x_of=lambda r: r.memory.weight_bytes / fmt.GB if r.memory else None)


def accuracy_vs_latency(records: list[RunRecord], selection: Selection) -> Plot | None:
    return _tradeoff(records, selection, plot_id="plot-latency", title="Accuracy vs latency",
                     xlabel="end-to-end latency p50, batch 1 (ms, log scale)", words=("latency", "e2e"),
                     x_of=lambda r: r.perf.latency.e2e_ms.p50 if r.perf and r.perf.latency else None)
