"""Hydra's sweeper `hydra/sweeper=selector`: hands the sweep's jobs to Hydra's launcher, all at once
(`search=grid`) or in the waves of an adaptive search (selector.sweep.lifecycle.Sweep.walk). The
plugin shell lives in hydra_plugins/selector_sweeper, where Hydra requires plugins to be.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf


class SweepRunner:
    def __init__(self, config: DictConfig, launcher: Any) -> None:
        self.config, self.launcher = config, launcher

    def sweep(self, arguments: list[str]) -> Any:
        from selector.compose import grid_overrides
        from selector.sweep.lifecycle import Sweep
        from selector.sweep.width import search_width

        base = Path(self.config.hydra.sweep.dir)
        base.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, base / "multirun.yaml")
        search = OmegaConf.select(self.config, "search") or {}
        return Sweep(base).walk(grid_overrides(self.config), search, lambda: search_width(self.config), self._launch)

    def _launch(self, batch: list[list[str]], first_index: int) -> Any:
        results = self.launcher.launch(batch, initial_job_idx=first_index)
        for r in results:
            _ = r.return_value  # a job that raised stops the sweep, as with Hydra's basic sweeper
        return results
