"""Hydra's callback: the start and the end of a sweep (selector.sweep.lifecycle), around its jobs.

Hydra calls it in the launching process, before the first job and after the last, for a sweep
(`-m`) and for a single run alike.
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
from selector.sweep.lifecycle import Sweep

log = logging.getLogger("selector.sweep.callback")


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
        setup_logging()
        self.t0 = time.time()
        # SIGTERM (a scheduler's pre-emption, `kill`) stops the sweep like Ctrl-C: the running
        # variant's worker is stopped and its MLflow runs end as KILLED.
        if threading.current_thread() is threading.main_thread():  # Python allows handlers only there
            signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            Sweep(base).start(config, multirun)
        except UserError as e:  # Hydra would only warn about an Exception here and run the jobs
            raise UsageExit(e) from None

    def _end(self, base: Path) -> None:
        sweep = Sweep(base)
        try:
            sweep.finish(time.time() - getattr(self, "t0", time.time()))
        except Exception as e:  # Hydra would only warn: the user must see it, and MLflow must know
            log.exception("selection/report failed; every variant's record is kept under %s", base)
            sweep.abort(f"{type(e).__name__}: {e}")
            sys.exit(1)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")
