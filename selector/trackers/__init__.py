"""Trackers by kind: `mlflow` (default) or `none`."""

from __future__ import annotations

from pathlib import Path

from selector.config import TrackerConfig
from selector.registry import Registry
from selector.trackers.base import EvalsetInfo, NullTracker, Tracker

__all__ = ["EvalsetInfo", "NullTracker", "TRACKERS", "Tracker", "make_tracker"]

TRACKERS: Registry = Registry("tracker")
TRACKERS.register("mlflow", "selector.trackers.mlflow:MlflowTracker")
TRACKERS.register("none", "selector.trackers.base:NullTracker")


def make_tracker(cfg: TrackerConfig, experiment: str, output_dir: str | Path) -> Tracker:
    if cfg.kind == "none":
        return NullTracker()
    return TRACKERS.get(cfg.kind)(cfg, experiment, Path(output_dir))
