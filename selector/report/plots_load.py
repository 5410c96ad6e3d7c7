"""Load-test figures: latency against concurrency, and throughput against latency.

Both are drawn only for variants that ran a load test; a sweep without one gets neither.
"""

from __future__ import annotations

import matplotlib
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from selector.report.plots import STYLE, Encoding, Plot, _svg, _text, plain_log_axis
from selector.report.view import order_records
from selector.types import LoadLevel, RunRecord


def _x(level: LoadLevel, by_rate: bool) -> float | None:
    return level.rate_rps if by_rate else (float(level.concurrency) if level.concurrency else None)


def _series(records: list[RunRecord]) -> tuple[list[tuple[RunRecord, list[LoadLevel]]], bool]:
    """Variants with load levels that have an e2e latency; by arrival rate only if none has concurrency."""
    with_load = [r for r in order_records(records) if r.perf and r.perf.load]
    by_rate = not any(lv.concurrency for r in with_load for lv in r.perf.load)  # type: ignore[union-attr]
    series = []
    for r in with_load:
        levels = [lv for lv in r.perf.load if lv.e2e_ms and _x(lv, by_rate)]  # type: ignore[union-attr]
        if levels:
            series.append((r, sorted(levels, key=lambda lv: _x(lv, by_rate) or 0)))
    return series, by_rate


def latency_vs_concurrency(records: list[RunRecord]) -> Plot | None:
    series, by_rate = _series(records)
    if not series:
        return None
    enc = Encoding([r for r, _ in series])
    title = "Latency vs arrival rate" if by_rate else "Latency vs concurrency"
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(8.6, 4.4), layout="constrained")
        ax = fig.subplots()
        for r, levels in series:
            xs = [_x(lv, by_rate) for lv in levels]
            style = dict(color=enc.colour[r.variant.model], marker=enc.marker[r.variant.precision], ms=5)
            ax.plot(xs, [lv.e2e_ms.p50 for lv in levels], lw=1.6, label=_text(r.name), **style)  # type: ignore[union-attr]
            ax.plot(xs, [lv.e2e_ms.p95 for lv in levels], lw=0.9, ls=":", **style)  # type: ignore[union-attr]
        levels_x = sorted({x for _, levels in series for x in (_x(lv, by_rate) for lv in levels) if x})
        ax.set_xscale("log", base=2 if not by_rate else 10)
        ax.set_xticks(levels_x, [f"{x:g}" for x in levels_x])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_yscale("log")
        plain_log_axis(ax.yaxis)
        ax.set_xlabel("arrival rate (requests/s)" if by_rate else "concurrent requests")
        ax.set_ylabel("end-to-end latency (ms, log scale)")
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    caption = "Solid: p50, dotted: p95 of end-to-end request latency at each load level."
    return Plot("plot-load-latency", title, caption, _svg(fig, "plot-load-latency", title))


def throughput_vs_latency(records: list[RunRecord]) -> Plot | None:
    series, by_rate = _series(records)
    if not series:
        return None
    enc = Encoding([r for r, _ in series])
    title = "Throughput vs latency under load"
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(8.6, 4.4), layout="constrained")
        ax = fig.subplots()
        for r, levels in series:
            xs = [lv.e2e_ms.p50 for lv in levels]  # type: ignore[union-attr]
            ys = [lv.output_tokens_per_s for lv in levels]
            ax.plot(xs, ys, lw=1.6, color=enc.colour[r.variant.model], marker=enc.marker[r.variant.precision],
                    ms=5, label=_text(r.name))
            last = levels[-1]
            tag = f"{last.rate_rps:g}/s" if by_rate else f"c={last.concurrency}"
            ax.annotate(tag, (xs[-1], ys[-1]), fontsize=7, xytext=(4, 2), textcoords="offset points",
                        color="#555")
        ax.set_xscale("log")
        plain_log_axis(ax.xaxis)
        ax.set_xlabel("end-to-end latency p50 (ms, log scale)")
        ax.set_ylabel("output tokens / s")
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    caption = ("Each point is one load level; up and to the left is better. The label gives the highest "
               "level reached.")
    return Plot("plot-load-throughput", title, caption, _svg(fig, "plot-load-throughput", title))

