"""How a sweep walks its grid: every variant at once, or an adaptive search through it. Hydra
runs it as the sweeper plugin `hydra/sweeper=selector` (hydra_plugins/selector_sweeper, which
Hydra requires plugins to live under).

`search=grid` launches every variant at once, as Hydra's basic sweeper does. `search=adaptive`
(the default) hands the launcher waves of as many variants as it runs at once (selector.sweep.width),
smallest planned weight memory first (selector.search.driver), reads each wave's records back, and prunes the
variants that can no longer win before the next wave; the runs that must see every item (the
reference under non_inferiority, the winner's own baseline as evidence) get `search.stop_early=false`.
What it decided and why goes to sweep.json for the end of the sweep (docs/search.md).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

log = logging.getLogger("selector.sweep.sweeper")
FULL = "search.stop_early=false"


class SweepRunner:
    """The sweep's jobs through a Hydra launcher, as the grid or as an adaptive search."""

    def __init__(self, config: DictConfig, launcher: Any) -> None:
        self.config, self.launcher = config, launcher

    def sweep(self, arguments: list[str]) -> Any:
        from selector.compose import grid_overrides
        from selector.sweep.state import read_state, write_state

        assert self.config is not None
        base = Path(self.config.hydra.sweep.dir)
        base.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, base / "multirun.yaml")
        jobs = grid_overrides(self.config)
        state = read_state(base)
        search = OmegaConf.select(self.config, "search") or {}
        t0 = time.time()
        if search.get("strategy", "adaptive") != "adaptive" or not state.get("variants"):
            results = [self._launch(jobs, 0)]
            state["search"] = {"strategy": "grid", "wall_s": time.time() - t0}
        else:
            results, summary = self._adaptive(jobs, state, search, base)
            state["search"] = {"strategy": "adaptive", "wall_s": time.time() - t0, **summary}
        write_state(base, state)
        return results

    def _launch(self, batch: list[list[str]], first_index: int) -> Any:
        results = self.launcher.launch(batch, initial_job_idx=first_index)
        for r in results:
            _ = r.return_value  # a job that raised stops the sweep, as with Hydra's basic sweeper
        return results

    def _adaptive(self, jobs: list[list[str]], state: dict[str, Any], search: Any,
                  base: Path) -> tuple[list[Any], dict[str, Any]]:
        from selector.compose import config_from_dict
        from selector.search.driver import SearchDriver
        from selector.sweep.outcomes import candidates, outcomes
        from selector.sweep.width import search_width

        variants = state["variants"]
        by_name = {v["name"]: job for v, job in zip(variants, jobs)}
        cfg = config_from_dict(state["config"])
        width = search_width(self.config)
        if width.hint:
            log.warning("%s: %s", width.source, width.hint)
        first = (state["reference"],) if cfg.policy.rule == "non_inferiority" and state.get("reference") else ()
        driver = SearchDriver(candidates(variants), workers=width.workers, objective=cfg.policy.objective,
                              complete=bool(search.get("complete")), first=first,
                              prune_margin=float(search.get("prune_margin", 0.05)),
                              descending=cfg.policy.winner_control == "fixed_sequence",
                              baseline_first=bool(cfg.measure.fidelity))
        log.info("adaptive search over %d variants, %d at a time (%s), in this order: %s", len(variants),
                 driver.workers, width.source, ", ".join(driver.order))
        results, index, waves = [], 0, []
        while not driver.done:
            wave = driver.next_wave()
            if wave is None:  # waves run to the end before the next starts, so this means done
                break
            batch = [by_name[name] + ([FULL] if wave.full else []) for name in wave.names]
            log.info("%s wave: %s", wave.kind, ", ".join(wave.names))
            started = time.time()
            results.append(self._launch(batch, index))
            waves.append({"kind": wave.kind, "names": list(wave.names), "wall_s": round(time.time() - started, 1)})
            index += len(batch)
            for name, outcome in outcomes(base, cfg.policy, wave.names).items():
                driver.report(name, outcome)
        summary = {"order": list(driver.order), "first": list(first), "workers": driver.workers,
                   "width_source": width.source, "waves": waves,
                   "verdicts": [{"name": n, "status": s, "reason": r} for n, s, r in driver.verdicts()],
                   "counts": driver.counts(), "notes": driver.notes}
        return results, summary
