"""The report's load-test section: per variant and level, what it served and where the time went.

Two tables of plain-text cells (report.view.Table), rendered by the HTML, Markdown and terminal
reports alike: the figures a load level measured, and the split of its latency into queue, batch
wait and compute with the diagnosis of report.diagnosis. None when no variant ran a load test.
"""

from __future__ import annotations

from typing import Any

from selector.report import fmt
from selector.engines.knobs import served_by
from selector.measure.diagnosis import SHORT, Serving, diagnose_ladder, headline
from selector.report.view import Cell, Table, order_records
from selector.records import LoadLevel, Percentiles, RunRecord, setting_label
from selector.verdicts import Selection

SPLIT_NOTE = (
    "Shares are of the slowest requests' time (those at or above e2e p95: their queue, batch wait and compute "
    "add up to their latency) when the split is per request (in-process), else of the mean request (a server's "
    "Prometheus histograms; 'other' is what the client saw beyond them). Under each share: that part's own p95 "
    "(which does not add up with the others), or for a server its mean (the histograms' percentiles are only as "
    "fine as their bucket edges). The rules naming the layer are in docs/load-testing.md."
)


def sorted_levels(levels: list[LoadLevel]) -> list[LoadLevel]:
    """Concurrency levels from the lightest, then arrival rates from the slowest."""
    return sorted(levels, key=lambda lv: (lv.replay_scale is not None, lv.concurrency is None, lv.concurrency or 0,
                                          lv.rate_rps or 0.0))


def with_load(records: list[RunRecord]) -> list[RunRecord]:
    return [r for r in order_records(records) if r.perf and r.perf.load]


def triple(p: Percentiles | None) -> str:
    """'120 / 340 / 400': p50 / p95 / p99 in ms."""
    return " / ".join(fmt.millis(getattr(p, q)) for q in ("p50", "p95", "p99")) if p else fmt.DASH


def goodput(level: LoadLevel) -> Cell:
    if level.goodput_rps is None:
        return Cell(fmt.DASH, "num muted", "no per-request SLO (measure.load.slo) was set")
    share = level.goodput_rps / level.request_throughput if level.request_throughput > 0 else 0.0
    return Cell(f"{fmt.sig(level.goodput_rps)} req/s", "num", sub=f"{share:.0%} within the SLO")


def levels_table(records: list[RunRecord]) -> Table:
    loaded = with_load(records)
    cached = any(lv.prefix_cache_hit_rate is not None for r in loaded for lv in r.perf.load)  # type: ignore[union-attr]
    table = Table(columns=["variant", "level", "req/s", "output tok/s", "TTFT p50 / p95 / p99 ms",
                           "ITL p50 / p95 / p99 ms", "e2e p50 / p95 / p99 ms", "errors", "goodput",
                           *(["prefix cache"] if cached else [])])
    for r in loaded:
        for lv in sorted_levels(r.perf.load):  # type: ignore[union-attr]
            table.rows.append([
                Cell(r.name, "name"), Cell(short_level(lv)), Cell(fmt.sig(lv.request_throughput), "num"),
                Cell(fmt.sig(lv.output_tokens_per_s), "num"), Cell(triple(lv.ttft_ms), "num"),
                Cell(triple(lv.itl_ms), "num"), Cell(triple(lv.e2e_ms), "num"),
                Cell(f"{lv.errors} of {lv.requests}", "num below" if lv.errors else "num"), goodput(lv),
                *([prefix_cache(lv)] if cached else []),
            ])
    table.note = ("Each level replays the same requests (the eval set's generation prompts, or measure.load.requests; "
                  "'recorded': that file's arrival times, stretched by measure.load.time_scale). Latencies of successful "
                  "requests; goodput: requests per second that met every limit of measure.load.slo."
                  + (" Prefix cache: share of the level's prompt tokens the server found in its prefix cache (vLLM's "
                     "/metrics)." if cached else ""))
    return table


def prefix_cache(level: LoadLevel) -> Cell:
    rate = level.prefix_cache_hit_rate
    return Cell(f"{rate:.0%}" if rate is not None else fmt.DASH, "num" if rate is not None else "num muted")


def split_table(records: list[RunRecord]) -> Table:
    rows, has_other = [], False
    for r in with_load(records):
        levels = sorted_levels(r.perf.load)  # type: ignore[union-attr]
        for lv, d in zip(levels, diagnose_ladder(levels, Serving(*served_by(r.config)))):
            has_other |= "other" in d.shares
            rows.append((r.name, lv, d))
    parts = ["queue", "batch_wait", "compute"] + (["other"] if has_other else [])
    table = Table(columns=["variant", "level", "e2e p95 ms", *(SHORT[p] for p in parts), "source", "diagnosis"])
    for name, lv, d in rows:
        e2e = fmt.millis(lv.e2e_ms.p95 if lv.e2e_ms else None)
        cells = [Cell(name, "name"), Cell(short_level(lv)), Cell(e2e, "num")]
        for part in parts:
            share = d.shares.get(part)
            dist = getattr(lv, f"{part}_ms", None)
            served = lv.split_source not in ("scheduler", "")  # bucketed histograms: their means are exact
            if dist is None:
                sub = ""
            else:
                sub = f"mean {fmt.millis(dist.mean)} ms" if served else f"p95 {fmt.millis(dist.p95)} ms"
            if share is None:
                cells.append(Cell(fmt.DASH, "num muted", sub=sub))
            else:
                cells.append(Cell(f"{share:.0%}", "num strong" if part == d.dominant else "num", sub=sub))
        cells += [Cell(_source(lv)), Cell(d.finding, "reasons")]
        table.rows.append(cells)
    table.note = SPLIT_NOTE
    return table


def settings_table(selection: Selection) -> Table | None:
    """Serving settings of each model x precision side by side, the best first (selection.settings)."""
    if not selection.settings:
        return None
    limits = bool(selection.policy.get("latency_limits"))
    table = Table(columns=["model / precision", "setting", "latency limits", "compared at", "goodput req/s",
                           "e2e p95 ms"], compact=True)
    for choice in selection.settings:
        for r in choice.results:
            best = r.variant == choice.best
            table.rows.append([
                Cell(choice.group, "name"), Cell(setting_label(r.setting), "strong" if best else ""),
                Cell(("met" if r.meets else "missed") if limits else "none set", "" if r.meets else "below", r.detail),
                Cell(r.level or fmt.DASH), Cell(fmt.sig(r.goodput_rps), "num strong" if best else "num"),
                Cell(fmt.millis(r.e2e_p95_ms), "num"),
            ])
    basis = {c.basis for c in selection.settings}
    no_slo = " (no SLO was set: every successful request counts)" if "throughput" in basis else ""
    table.note = ("Settings share their model's scored items, so accuracy is the same; each row is one serving "
                  "setting's load test, compared at the heaviest level all settings ran. Goodput: the requests per "
                  f"second meeting measure.load.slo{no_slo}; latency limits: policy.latency_limits. Best first, "
                  "in bold.")
    return table


def load_section(records: list[RunRecord], selection: Selection | None = None) -> dict[str, Any] | None:
    """The tables and, per variant, the diagnosis at its heaviest level; None without load tests
    or capacity searches."""
    from selector.report.capacity_view import capacity_table, confirmation_table, curve_table, policy_of

    loaded = with_load(records)
    capacity = capacity_table(records, policy_of(selection.policy if selection else None))
    if not loaded and capacity is None:
        return None
    lines = []
    for r in loaded:
        top = headline(r.perf.load, Serving(*served_by(r.config)))  # type: ignore[union-attr]
        if top is not None:
            lines.append({"variant": r.name, "text": top.text})
    return {"levels": levels_table(records) if loaded else None, "split": split_table(records) if loaded else None,
            "capacity": capacity, "confirmation": confirmation_table(records), "curve": curve_table(records),
            "headlines": lines,
            "settings": settings_table(selection) if selection else None,
            "settings_summary": [c.summary for c in selection.settings] if selection else []}


def short_level(level: LoadLevel) -> str:
    if level.concurrency is not None:
        return f"c={level.concurrency}"
    if level.replay_scale is not None:
        return f"recorded x{level.replay_scale:g}"
    return f"{level.rate_rps:g} req/s"


def _source(level: LoadLevel) -> str:
    return {"scheduler": "per request", "vllm": "vLLM /metrics", "tgi": "TGI /metrics"}.get(level.split_source, "none")
