"""sweep.json: what the sweep's start tells its jobs and its end, wherever a launcher runs them.

One typed object, `SweepState`, written and read only here. The start of the sweep writes it
before any job starts (the parent run id, the sweep's key and resolved config, the planned
variants); each job reads it to find its parent run; the adaptive search adds what it decided; the
end of the sweep reads it to select with the sweep's own policy. Everyone reads it from the sweep
folder Hydra names, never from the environment: a Ray worker's environment is its cluster's. (The
launching process's environment still gets its path, SELECTOR_SWEEP_STATE, which `selector.run`
puts back afterwards.)

Fields have defaults so that a sweep folder written by an older version still reads back.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from pydantic import BaseModel, ConfigDict, Field

from selector.paths import SWEEP_STATE_FILE

STATE_ENV = "SELECTOR_SWEEP_STATE"
STATE_FILE = SWEEP_STATE_FILE
SETTING_RESOLVER = "selector.setting_subdir"
# The override the search adds to a job that must see every item (the reference, a baseline as evidence).
FULL = "search.stop_early=false"


class _Stored(BaseModel):
    # Unknown fields are kept, not refused: a newer sweep.json must still read back in an older tool.
    model_config = ConfigDict(extra="allow", protected_namespaces=())


class PlannedEntry(_Stored):
    """One planned variant as the preflight resolved it (selector.sweep.preflight.PlannedVariant):
    its job runs on this, composing and validating nothing again."""
    name: str
    key: str = ""
    evaluation_key: str = ""
    overrides: list[str] = Field(default_factory=list)  # the job's overrides, as the launcher hands them over
    config: dict[str, Any] | None = None  # the job's validated config, its policy with the eval set's floors
    baseline: dict[str, Any] | None = None  # the baseline precision's config, when a fidelity reference is wanted
    available: bool = True
    reason: str = ""
    model: str = ""
    precision: str = ""  # empty in sweep.json files from before variants kept it apart from the model
    setting: dict[str, Any] = Field(default_factory=dict)
    family: str = ""
    params: int = 0
    planned_bytes: float = 0.0
    needs_quantization: bool = False
    is_baseline: bool = False


class Wave(_Stored):
    kind: str
    names: list[str]
    wall_s: float | None = None


class SearchVerdict(_Stored):
    name: str
    status: str
    reason: str = ""


class SearchSummary(_Stored):
    """How the sweep walked its grid (selector.sweep.lifecycle) and, when adaptive, what it decided."""
    strategy: str = "grid"
    wall_s: float = 0.0
    order: list[str] = Field(default_factory=list)
    first: list[str] = Field(default_factory=list)
    workers: int | None = None
    width_source: str = ""
    waves: list[Wave] = Field(default_factory=list)
    verdicts: list[SearchVerdict] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)


class SweepState(_Stored):
    # The sweep's own resolved config: the end of the sweep selects with ITS policy, whatever the
    # (possibly reused) records were measured under. None only in sweep folders of older versions.
    config: dict[str, Any] | None = None
    parent_run_id: str | None = None
    sweep_key: str = ""
    tracking_uri: str = ""
    started_at: float | None = None
    reference: str | None = None  # the variant every other is compared with under non_inferiority
    reference_evaluation_key: str | None = None
    variants: list[PlannedEntry] = Field(default_factory=list)
    order_seed: int | None = None  # the item order every variant of this sweep is scored in
    order_seed_source: str | None = None
    serving_knobs: list[str] = Field(default_factory=list)  # the knobs it varies: names and job folders say the setting
    search: SearchSummary | None = None

    def planned(self) -> dict[str, PlannedEntry]:
        return {v.name: v for v in self.variants}

    def entry_for(self, overrides: list[str]) -> PlannedEntry | None:
        """The planned variant a job's overrides describe (the search's FULL aside)."""
        asked = [o for o in overrides if o != FULL]
        return next((v for v in self.variants if v.overrides == asked), None)

    @property
    def adaptive(self) -> bool:
        return self.search is not None and self.search.strategy == "adaptive"


def write_state(base: Path, state: SweepState) -> Path:
    base.mkdir(parents=True, exist_ok=True)
    path = base / STATE_FILE
    path.write_text(state.model_dump_json(indent=2, exclude_none=False))
    os.environ[STATE_ENV] = str(path.resolve())
    return path


def has_state(base: Path) -> bool:
    return (Path(base) / STATE_FILE).exists()


def read_state(base: Path) -> SweepState:
    """The sweep's state from its folder; a folder without sweep.json reads as an empty state."""
    path = Path(base) / STATE_FILE
    return _parse(path) if path.exists() else SweepState()


def _parse(path: Path) -> SweepState:
    from selector.errors import UserError

    try:
        return SweepState.model_validate(json.loads(path.read_text()))
    except ValueError as e:  # JSONDecodeError and pydantic's ValidationError both are
        raise UserError(f"{path}: not a readable sweep state ({type(e).__name__}: {e})") from None


def _setting_subdir(*, _root_: Any) -> str:
    """'/max_batch_size=8' for a job of a sweep that varies serving knobs, else ''. The knobs are
    the sweep's (sweep.json, written before any job starts); the values are this job's."""
    from selector.engines.knobs import all_knobs, setting_dir

    knobs = _sweep_knobs(_root_)
    if not knobs:
        return ""
    dotted = {short: key for key, short in all_knobs().items()}
    return "/" + setting_dir({short: OmegaConf.select(_root_, dotted[short]) for short in knobs})


def _sweep_knobs(root: Any) -> list[str]:
    base = Path(str(OmegaConf.select(root, "hydra.sweep.dir", default="") or ""))
    if not base.is_absolute():  # a worker elsewhere (Ray, SLURM) starts in a folder of its own
        base = Path(str(OmegaConf.select(root, "hydra.runtime.cwd", default="") or ".")) / base
    from selector.errors import UserError

    try:
        return read_state(base).serving_knobs if has_state(base) else []
    except (OSError, UserError):
        return []


def register_resolver() -> None:
    """conf/config.yaml names each job's folder with `${selector.setting_subdir:}`."""
    if not OmegaConf.has_resolver(SETTING_RESOLVER):
        OmegaConf.register_new_resolver(SETTING_RESOLVER, _setting_subdir)


register_resolver()
