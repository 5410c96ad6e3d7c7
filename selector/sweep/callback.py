"""The sweep around Hydra's jobs: a parent MLflow run, preflight, and selection + report at the end.

Hydra calls `SweepCallback` in the launching process (before and after all jobs) and `run_job` once
per variant, wherever its launcher runs it. They share the parent run id and the sweep's key
through `sweep.json` in the sweep folder (and an environment variable for local launchers).
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from selector.errors import UsageExit, UserError
from selector.logs import setup_logging
from selector.sweep.state import write_state

log = logging.getLogger("selector.sweep.callback")
last_sweep_dir: Path | None = None  # the folder of the newest sweep this process started (selector.api reads it)


class SweepCallback(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._start(config, Path(config.hydra.sweep.dir), multirun=True)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._start(config, Path(config.hydra.run.dir), multirun=False)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._end(Path(config.hydra.sweep.dir))

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._end(Path(config.hydra.run.dir))

    def _start(self, config: DictConfig, base: Path, multirun: bool) -> None:
        global last_sweep_dir
        from selector.sweep import preflight
        from selector.trackers import make_tracker

        setup_logging()
        self.t0 = time.time()
        # SIGTERM (a scheduler's pre-emption, `kill`) stops the sweep like Ctrl-C: the running
        # variant's worker is stopped and its MLflow runs end as KILLED.
        if threading.current_thread() is threading.main_thread():  # Python allows handlers only there
            signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            planned, skey = preflight.plan(config, multirun)
            if not any(p.available for p in planned):
                raise UserError(preflight.unavailable_message(planned))
        except UserError as e:  # Hydra would only warn about an Exception here and run the jobs
            raise UsageExit(e) from None
        first = planned[0].cfg
        tracker = make_tracker(first.tracker, first.experiment, first.output_dir)
        params = {
            "models": ",".join(dict.fromkeys(p.cfg.model.name for p in planned)),
            "precisions": ",".join(dict.fromkeys(p.cfg.precision.name for p in planned)),
            "evalset": first.evalset.path,
            "policy.rule": first.policy.rule,
            **{f"policy.floor.{k}": v for k, v in first.policy.floors.items()},
            "variants": len(planned),
            "sweep_dir": str(base),
        }
        name = f"sweep {time.strftime('%Y-%m-%d %H:%M')} ({len(planned)} variants)"
        from selector.config import to_dict

        parent = tracker.start_sweep(skey, name, params, {"selector.status": "running"}, config=to_dict(first))
        stale = tracker.mark_interrupted(parent)
        if stale:
            log.info("marked %d interrupted variant run(s) of an earlier attempt as KILLED", stale)
        base.mkdir(parents=True, exist_ok=True)
        last_sweep_dir = base.resolve()
        reference = preflight.reference_variant(planned)
        from selector.compose import given_keys
        from selector.sweep import order_seed

        _, ehash = preflight.load_tasks(first)
        seed, seed_source = order_seed.resolve(first.search.seed, first.seed, "seed" in given_keys(planned[0].overrides),
                                               first.output_dir, ehash)
        state = {
            # The sweep's own resolved config: the end of the sweep selects with ITS policy, whatever
            # the (possibly reused) records were measured under.
            "config": to_dict(first),
            "parent_run_id": parent,
            "sweep_key": skey,
            "tracking_uri": tracker.uri,
            "started_at": self.t0,
            "reference": reference,
            "reference_evaluation_key": next((p.evaluation_key for p in planned if p.name == reference), None),
            "variants": [p.describe() for p in planned],
            "order_seed": seed,  # the item order every variant of this sweep is scored in
            "order_seed_source": seed_source,
            "serving_knobs": list(planned[0].setting),  # the knobs it varies: names and job folders say the setting
        }
        write_state(base, state)
        log.info("sweep of %d variants; MLflow %s, parent run %s", len(planned), tracker.uri, parent)

    def _end(self, base: Path) -> None:
        from selector.sweep.end import abort_sweep, finish_sweep

        try:
            finish_sweep(base, time.time() - getattr(self, "t0", time.time()))
        except Exception as e:  # Hydra would only warn: the user must see it, and MLflow must know
            log.exception("selection/report failed; every variant's record is kept under %s", base)
            abort_sweep(base, f"{type(e).__name__}: {e}")
            sys.exit(1)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


