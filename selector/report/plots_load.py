"""Load-test figures: latency against concurrency, throughput against latency, and the trade-off
between serving settings of one model x precision.

Each is drawn only when its data is there: a sweep without a load test gets none, one that varies
no serving knob gets no trade-off figure.
"""

from __future__ import annotations

import matplotlib
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from selector.report.plots import MARKERS, OKABE_ITO, STYLE, Encoding, Plot, _svg, _text, plain_log_axis
from selector.report.view import order_records
from selector.records import LoadLevel, RunRecord, setting_label
from selector.verdicts import Selection


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



def settings_tradeoff(records: list[RunRecord], selection: Selection) -> Plot | None:
    """Per model x precision, each serving setting's load levels: goodput (or requests/s without an
    SLO) against e2e p95. The best setting (selection.settings) is drawn bold."""
    if not selection.settings:
        return None
    by_name = {r.name: r for r in records}
    groups = selection.settings[:3]  # three panels fit the page
    goodput = all(c.basis == "goodput" for c in groups)
    title = "Serving settings: goodput vs tail latency" if goodput else "Serving settings: throughput vs tail latency"
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(8.6, 4.2), layout="constrained")
        axes = fig.subplots(1, len(groups), squeeze=False)[0]
        for ax, choice in zip(axes, groups):
            for i, result in enumerate(choice.results):
                record = by_name.get(result.variant)
                levels = [lv for lv in (record.perf.load if record and record.perf else []) if lv.e2e_ms]
                levels.sort(key=lambda lv: (lv.concurrency is None, lv.concurrency or 0, lv.rate_rps or 0))
                if not levels:
                    continue
                best = result.variant == choice.best
                xs = [lv.e2e_ms.p95 for lv in levels]  # type: ignore[union-attr]
                ys = [(lv.goodput_rps or 0.0) if goodput else lv.request_throughput for lv in levels]
                label = _text(setting_label(result.setting)) + (" ★" if best else "")
                ax.plot(xs, ys, lw=2.4 if best else 1.2, marker=MARKERS[i % len(MARKERS)], ms=5,
                        color=OKABE_ITO[i % len(OKABE_ITO)], label=label)
                for lv, x, y in zip(levels, xs, ys):
                    tag = f"c={lv.concurrency}" if lv.concurrency is not None else f"{lv.rate_rps:g}/s"
                    ax.annotate(tag, (x, y), fontsize=7, xytext=(3, 2), textcoords="offset points", color="#555")
            ax.set_title(_text(choice.group), fontsize=9.5)
            ax.set_xlabel("e2e p95 (ms)")
            ax.set_ylabel("goodput (req/s within the SLO)" if goodput else "requests / s")
            ax.legend(fontsize=7.5, loc="best")
    caption = ("Each line is one serving setting, each point one load level: up and to the left is better. ★: the "
               "setting that meets the latency limits at the highest "
               + ("goodput." if goodput else "throughput (no SLO was set)."))
    return Plot("plot-settings", title, caption, _svg(fig, "plot-settings", title))


def capacity_curve(records: list[RunRecord]) -> Plot | None:
    """The rate search's probes: p95 of the percentile-limited figure against the offered rate, one
    point per run, the runs' mean per rate as a line, the limit as a line, the capacity and its
    interval marked; one axis, e2e p95 where limited, else the first limited figure."""
    found = [r for r in order_records(records) if r.perf and r.perf.capacity and r.perf.capacity.steps]
    if not found:
        return None
    enc = Encoding(found)
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(8.6, 4.4), layout="constrained")
        ax = fig.subplots()
        limits = set()
        for r in found:
            cap = r.perf.capacity  # type: ignore[union-attr]
            key = "e2e_ms_p95" if "e2e_ms_p95" in cap.slo else next(iter(cap.steps[0].checks), None)
            if key is None:
                continue
            points = [(s.at, s.checks[key]["estimate"]) for s in cap.steps if s.checks.get(key, {}).get("estimate")]
            if not points:
                continue
            style = dict(color=enc.colour[r.variant.model], marker=enc.marker[r.variant.precision], ms=5)
            by_rate: dict[float, list[float]] = {}
            for rate, value in points:
                by_rate.setdefault(rate, []).append(value)
            rates = sorted(by_rate)
            ax.plot(rates, [sum(by_rate[x]) / len(by_rate[x]) for x in rates], lw=1.4,
                    label=_text(f"{r.name} ({key})"), **style)
            ax.plot(*zip(*points), ls="none", alpha=0.45, **style)
            if cap.capacity_rps:
                ax.axvline(cap.capacity_rps, color=style["color"], lw=0.8, ls="--")
            if cap.low is not None and cap.high is not None:
                ax.axvspan(cap.low, cap.high, color=style["color"], alpha=0.08, lw=0)
            limits.add(cap.slo[key])
        for limit in limits:
            ax.axhline(limit, color="0.4", lw=0.8, ls=":")
        ax.set_yscale("log")
        plain_log_axis(ax.yaxis)
        ax.set_xlabel("offered arrival rate (requests/s)")
        ax.set_ylabel("latency percentile (ms, log scale)")
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    title = "Latency vs arrival rate: the capacity search"
    caption = ("Each probe of the capacity search by rate (faint: one run; line: the runs' mean at that rate), the "
               "limited percentile against the offered rate (dotted: the limit; dashed: the capacity, the geometric "
               "mean of the runs' crossings; shaded: its confidence interval).")
    return Plot("plot-capacity", title, caption, _svg(fig, "plot-capacity", title))
