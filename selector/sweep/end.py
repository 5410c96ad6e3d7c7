"""The end of a sweep, step by step (selector.sweep.lifecycle.Sweep.finish runs them in order): the
config it selects with, the parent run's metrics and tags, the console summary, and closing the
parent run as FAILED when the end itself breaks. (The comparison with an earlier sweep is
selector.sweep.comparison's.)"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from selector.config import SelectorConfig
from selector.records import RunRecord
from selector.sweep.judging import gather_records
from selector.sweep.state import SweepState, read_state
from selector.verdicts import Selection

log = logging.getLogger("selector.sweep.end")


def sweep_config(state: SweepState, records: list[RunRecord]) -> SelectorConfig:
    """The config the sweep ran with (sweep.json). A record's own config says how IT was measured,
    which for a reused record may be another sweep's policy; only sweeps written before sweep.json
    held the config fall back to it."""
    from selector.compose import config_from_dict

    if state.config is not None:
        return config_from_dict(state.config)
    log.warning("sweep.json holds no config (an older sweep): using the first record's")
    return config_from_dict(records[0].config)


def close_parent_run(cfg: SelectorConfig, state: SweepState, records: list[RunRecord], selection: Selection,
                     paths: dict[str, Path], wall_s: float, saved: dict[str, float] | None) -> None:
    """The sweep's counts, memory and verdict on its parent run, the report as its artifacts, and
    each variant's flip counts on its child run."""
    from selector.trackers import make_tracker
    from selector.trackers.naming import settings_tags

    tracker = make_tracker(cfg.tracker, cfg.experiment, cfg.output_dir)
    metrics = {
        "sweep/variants": len(records),
        **{f"sweep/{status}": sum(r.status == status for r in records)
           for status in ("completed", "failed", "skipped", "stopped", "not_needed")},
        "sweep/wall_s": wall_s,
        **({f"search/{k}": v for k, v in saved.items()} if saved else {}),
        **_memory_metrics(records),
    }
    tags = {"selector.status": "completed", "selector.winner": selection.winner or "none",
            "selector.search": state.search.strategy if state.search else "grid",
            "mlflow.note.content": selection.summary, **settings_tags(selection)}
    tracker.finish_sweep(state.parent_run_id, metrics, tags, list(paths.values()))
    _log_flips(tracker, records, selection)


def print_summary(cfg: SelectorConfig, state: SweepState, records: list[RunRecord], selection: Selection,
                  paths: dict[str, Path], saved: dict[str, float] | None) -> None:
    """The console's end of the sweep: the verdicts, what the search saved, where the report is."""
    from selector.report import print_terminal_summary
    from selector.report.search_view import wave_lines
    from selector.sweep.searched import summary_line
    from selector.trackers import make_tracker

    print_terminal_summary(records, selection)
    if saved and state.search:
        print("\n" + summary_line(saved))
        heading, waves = wave_lines(state.search.model_dump())
        if heading:
            print("\n".join([heading + ":", *("  " + line for line in waves)]))
    print(f"\nReport: {paths['html']}\n        {paths['md']}\n        {paths['json']}")
    tracker = make_tracker(cfg.tracker, cfg.experiment, cfg.output_dir)
    hint = tracker.ui_hint(state.parent_run_id, [r.mlflow_run_id for r in records if r.mlflow_run_id])
    if hint:
        print("MLflow: " + "\n        ".join(hint))


def _memory_metrics(records: list[RunRecord]) -> dict[str, float]:
    """The sweep process itself stays small: each variant's memory lives and dies with its worker."""
    import resource

    from selector.resources.memory import peak_rss_bytes

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


def abort_sweep(base: Path, why: str) -> None:
    """Close the parent run as FAILED when the end of a sweep itself breaks."""
    from selector.trackers import make_tracker

    state = read_state(base)
    records = gather_records(base)
    if state.parent_run_id is None or not records:
        return
    cfg = sweep_config(state, records)
    tracker = make_tracker(cfg.tracker, cfg.experiment, cfg.output_dir)
    tracker.finish_sweep(state.parent_run_id, {}, {"selector.status": "failed", "selector.reason": why[:5000]},
                         [], status="FAILED")
