"""The end of a sweep: gather every variant's record, select, write the report, close the parent run."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from selector.config import SelectorConfig
from selector.sweep.judging import gather_records, report_context, select_and_report
from selector.sweep.searched import not_needed_records, savings, summary_line
from selector.sweep.state import read_state
from selector.records import RunRecord
from selector.verdicts import Selection

log = logging.getLogger("selector.sweep.end")


def finish_sweep(base: Path, wall_s: float) -> None:
    from selector.report import print_terminal_summary
    from selector.trackers import make_tracker
    from selector.trackers.naming import settings_tags

    state = read_state(base)
    adaptive = (state.get("search") or {}).get("strategy") == "adaptive"
    if adaptive:
        not_needed_records(state, base)  # written to their job folders, gathered with the rest
    records = gather_records(base)
    if not records:
        log.warning("no variant records under %s: nothing to select from", base)
        return
    cfg = sweep_config(state, records)
    context = report_context(cfg, state, base, wall_s)
    saved = savings(records, state) if adaptive else None
    if saved:
        context["search"] = {**state["search"], "savings": saved, "order_seed": state.get("order_seed"),
                             "order_seed_source": state.get("order_seed_source")}
    from selector.report.samples import load_samples

    if cfg.compare_to:
        from selector.report.compare import Side
        from selector.sweep.stored import compare_with

        context["comparison"] = compare_with(cfg, Side(str(base), records, state.get("config") or {},
                                                       state.get("parent_run_id"), state.get("tracking_uri", ""),
                                                       state.get("started_at")))
    selection, paths = select_and_report(records, cfg, context, base / "report", load_samples(base))
    tracker = make_tracker(cfg.tracker, cfg.experiment, cfg.output_dir)
    metrics = {
        "sweep/variants": len(records),
        "sweep/completed": sum(r.status == "completed" for r in records),
        "sweep/failed": sum(r.status == "failed" for r in records),
        "sweep/skipped": sum(r.status == "skipped" for r in records),
        "sweep/stopped": sum(r.status == "stopped" for r in records),
        "sweep/not_needed": sum(r.status == "not_needed" for r in records),
        "sweep/wall_s": wall_s,
        **({f"search/{k}": v for k, v in saved.items()} if saved else {}),
        **_memory_metrics(records),
    }
    tags = {"selector.status": "completed", "selector.winner": selection.winner or "none",
            "selector.search": (state.get("search") or {}).get("strategy", "grid"),
            "mlflow.note.content": selection.summary, **settings_tags(selection)}
    tracker.finish_sweep(state.get("parent_run_id"), metrics, tags, list(paths.values()))
    _compare_with_earlier(context.get("comparison"), state, base)
    _log_flips(tracker, records, selection)
    print_terminal_summary(records, selection)
    if saved:
        print("\n" + summary_line(saved))
        from selector.report.sections import wave_lines

        heading, waves = wave_lines(state["search"])
        if heading:
            print("\n".join([heading + ":", *("  " + line for line in waves)]))
    print(f"\nReport: {paths['html']}\n        {paths['md']}\n        {paths['json']}")
    hint = tracker.ui_hint(state.get("parent_run_id"), [r.mlflow_run_id for r in records if r.mlflow_run_id])
    if hint:
        print("MLflow: " + "\n        ".join(hint))


def _compare_with_earlier(comparison: dict[str, Any] | None, state: dict[str, Any], base: Path) -> None:
    """The comparison's own files beside the report, and on this sweep's parent run."""
    if not comparison or comparison.get("error"):
        return
    from selector.report.compare import Side
    from selector.sweep.comparison import log_comparison, write_comparison

    paths = write_comparison(comparison, base / "report")
    before = Side(comparison["a"]["label"], [], {}, comparison["a"].get("parent_run_id"))
    this = Side(str(base), [], {}, state.get("parent_run_id"), state.get("tracking_uri") or "")
    log_comparison(comparison, before, this, paths)


def _memory_metrics(records: list[RunRecord]) -> dict[str, float]:
    """The sweep process itself stays small: each variant's memory lives and dies with its worker."""
    import resource

    from selector.measure.memory import peak_rss_bytes

    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # the largest child, KiB on Linux
    variants = [r.memory.peak_rss_bytes for r in records if r.memory and r.memory.peak_rss_bytes]
    out = {"sweep/parent_peak_rss_gb": peak_rss_bytes() / 2**30, "sweep/largest_child_peak_rss_gb": children / 2**30}
    if variants:
        out["sweep/largest_variant_peak_rss_gb"] = max(variants) / 2**30
    return out


def _log_flips(tracker: Any, records: list[RunRecord], selection: Selection) -> None:
    """Flip counts need the baseline's record, so they reach each child run at the sweep's end."""
    from selector.trackers.naming import flip_metrics

    run_ids = {r.name: r.mlflow_run_id for r in records}
    for verdict in selection.verdicts:
        tracker.log_metrics(run_ids.get(verdict.variant), flip_metrics(verdict))


def sweep_config(state: dict[str, Any], records: list[RunRecord]) -> SelectorConfig:
    """The config the sweep ran with (sweep.json). A record's own config says how IT was measured,
    which for a reused record may be another sweep's policy; only sweeps written before sweep.json
    held the config fall back to it."""
    from selector.compose import config_from_dict

    if "config" in state:
        return config_from_dict(state["config"])
    log.warning("sweep.json holds no config (an older sweep): using the first record's")
    return config_from_dict(records[0].config)


def abort_sweep(base: Path, why: str) -> None:
    """Close the parent run as FAILED when the end of a sweep itself breaks."""
    from selector.trackers import make_tracker

    state = read_state(base)
    records = gather_records(base)
    if not state or not records:
        return
    cfg = sweep_config(state, records)
    tracker = make_tracker(cfg.tracker, cfg.experiment, cfg.output_dir)
    tracker.finish_sweep(state.get("parent_run_id"), {}, {"selector.status": "failed", "selector.reason": why[:5000]},
                         [], status="FAILED")
