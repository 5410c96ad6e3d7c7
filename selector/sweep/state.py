"""sweep.json: what the sweep's start tells its jobs and its end, wherever a launcher runs them.

The callback writes it before any job starts (the parent run id, the sweep's key and resolved
config, the planned variants); each job reads it to find its parent run; the end of the sweep
reads it to select with the sweep's own policy. Local launchers also get its path through an
environment variable (a Ray or SLURM job finds it in the sweep folder).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from selector.paths import SWEEP_STATE_FILE

STATE_ENV = "SELECTOR_SWEEP_STATE"
STATE_FILE = SWEEP_STATE_FILE


def write_state(base: Path, state: dict[str, Any]) -> Path:
    base.mkdir(parents=True, exist_ok=True)
    path = base / STATE_FILE
    path.write_text(json.dumps(state, indent=2))
    os.environ[STATE_ENV] = str(path.resolve())
    return path


def read_state(base: Path | None = None) -> dict[str, Any]:
    """The sweep's state from its folder; without one, from the environment or Hydra's sweep folder."""
    if base is None:
        found = os.environ.get(STATE_ENV)
        if found and Path(found).exists():
            return json.loads(Path(found).read_text())
        from hydra.core.hydra_config import HydraConfig

        hc = HydraConfig.get()
        base = Path(hc.sweep.dir if hc.mode.name == "MULTIRUN" else hc.run.dir)
    path = Path(base) / STATE_FILE
    return json.loads(path.read_text()) if path.exists() else {}
