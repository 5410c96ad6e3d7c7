"""selector from Python: run a sweep, load a finished one, select again under another policy, or
measure one variant (`evaluate`, the function each sweep's worker runs, without Hydra's app).

    import selector

    result = selector.run(["model=smollm2-135m", "precision=bf16,int8"], output_dir="outputs")
    print(result.winner, result.report_paths["html"])
    stricter = result.select({"rule": "lower_bound", "floors": {"code": 0.6}}, report=True)
    again = selector.load("outputs/sweeps/2026-11-30_10-00-00-000000")  # or an MLflow parent run id

`run` is the command line, not a second path to it: both start a sweep through the same entry
(selector.sweep.entry.run_sweep: the checks, then the Hydra app on the overrides as given, without
sys.argv) in this process, so a sweep from a notebook composes, checks, measures, logs and reports
exactly as `selector ...` does; every variant still runs in a worker process of its own, so no
model memory stays in the caller. In-process keeps the errors typed: bad input raises the same
UserError subclass (ConfigError, EvalsetError, ...) the command line prints, never SystemExit; a
sweep that breaks after it started raises SweepError. What the Hydra app changes in the process
(logging handlers, the SIGTERM handler, the sweep-state variable) is put back afterwards.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from selector.config import PolicyConfig, SelectorConfig
from selector.paths import CONF_DIR
from selector.errors import SweepError, UsageExit, UserError
from selector.sweep.stored import StoredSweep
from selector.records import RunRecord
from selector.verdicts import Selection

Overrides = Sequence[str] | Mapping[str, Any] | None
REPORT_FILES = {"html": "report.html", "md": "report.md", "json": "report.json"}


@dataclass
class SweepResult:
    """A sweep's records and the recommendation under `config.policy`."""

    records: list[RunRecord]
    selection: Selection
    config: SelectorConfig  # the config the sweep ran with; its policy is the one `selection` used
    sweep_dir: Path | None  # the sweep folder (None for a sweep read from MLflow alone)
    report_paths: dict[str, Path] = field(default_factory=dict)  # html / md / json of this selection's report
    tracking_uri: str | None = None
    parent_run_id: str | None = None
    _stored: StoredSweep | None = field(default=None, repr=False)

    @property
    def winner(self) -> str | None:
        """The recommended variant ("model/precision"), or None when no variant meets the policy."""
        return self.selection.winner

    @property
    def policy(self) -> PolicyConfig:
        return self.config.policy

    def record(self, name: str) -> RunRecord:
        """The record of one variant, by its name ("model/precision")."""
        for r in self.records:
            if r.name == name:
                return r
        raise KeyError(f"no variant {name!r}; variants: {', '.join(r.name for r in self.records)}")

    def select(self, policy: Overrides = None, *, report: bool | str | Path = False) -> SweepResult:
        """The same records under the sweep's recorded policy with these changes, as
        `selector select --from` applies them: override strings (["policy.rule=lower_bound"]) or a
        dict of policy fields ({"rule": "lower_bound", "floors": {"code": 0.6}}; floors given are
        set, the others kept). report=True writes a new report next to the sweep (or to a folder)."""
        from selector.sweep import reselect, stored

        overrides = policy_overrides(policy)
        cfg = stored.sweep_config(self._require_stored(), overrides)
        out = _report_dir(self._require_stored(), report)
        selection, paths = reselect.select_again(self._require_stored(), cfg, out)
        return replace(self, selection=selection, config=cfg, report_paths=paths)

    def report(self, out: str | Path | None = None) -> dict[str, Path]:
        """Write this selection's report (HTML, Markdown, JSON); return the paths by format."""
        from selector.sweep import reselect

        _, paths = reselect.select_again(self._require_stored(), self.config, _report_dir(self._require_stored(), out or True))
        self.report_paths = paths
        return paths

    def table(self) -> Any:
        """Per variant: verdict, accuracy per task, weight GB and median latency (a pandas DataFrame)."""
        import pandas as pd

        verdicts = {v.variant: v.status for v in self.selection.verdicts}
        rows = []
        for r in self.records:
            row: dict[str, Any] = {"variant": r.name, "status": r.status, "verdict": verdicts.get(r.name)}
            row.update({task: round(t.value, 4) for task, t in sorted(r.tasks.items())})
            row["weight GB"] = round(r.memory.weight_bytes / 1e9, 4) if r.memory else None
            lat = r.perf.latency if r.perf else None
            row["e2e p50 ms"] = round(lat.e2e_ms.p50, 1) if lat else None
            rows.append(row)
        return pd.DataFrame(rows).set_index("variant")

    def _require_stored(self) -> StoredSweep:
        if self._stored is None:
            raise ValueError("this SweepResult was not made by selector.run or selector.load")
        return self._stored


def run(overrides: Overrides = None, *, output_dir: str | Path | None = None) -> SweepResult:
    """Run a sweep as `selector OVERRIDES...` does and return its records and recommendation.

    overrides: command-line overrides (["model=smollm2-135m", "precision=bf16,int8",
    "evalset.limit=10"]) or a dict ({"model": "smollm2-135m", "precision": ["bf16", "int8"],
    "evalset": {"limit": 10}}: a list under a config group sweeps it, nested dicts are dotted keys).
    output_dir: where the sweep folder, records and MLflow store go (default: ./outputs)."""
    from selector.commands import COMMANDS
    from selector.sweep import lifecycle, stored
    from selector.sweep.entry import run_sweep

    args = as_overrides(overrides)
    if args and args[0] in COMMANDS:
        raise ValueError(f"selector.run runs sweeps; `{args[0]}` is a sub-command of the command line")
    if output_dir is not None:
        if any(a.lstrip("+").startswith("output_dir=") for a in args):
            raise ValueError("output_dir is given twice: as an override and as the output_dir argument")
        args.append(f"output_dir={_value(str(Path(output_dir).expanduser().resolve()))}")
    lifecycle.last_sweep_dir = None
    with _hydra_in_this_process():
        try:
            run_sweep(args)
        except UsageExit as e:  # bad input found inside Hydra (the sweep's preflight)
            raise e.error from None
        except SystemExit as e:  # Hydra's own error report, or the end of the sweep breaking
            if e.code not in (0, None):
                where = f" (records are kept under {lifecycle.last_sweep_dir})" if lifecycle.last_sweep_dir else ""
                raise SweepError(f"the sweep stopped with exit code {e.code}{where}; its log says why") from None
    base = lifecycle.last_sweep_dir
    if base is None:
        raise SweepError("the sweep did not start (no sweep folder was made)")
    return _result(stored.from_folder(base), report=base / "report")


def evaluate(overrides: Overrides = None, *, model: str | None = None, precision: str | None = None,
             evalset: str | None = None, engine: str | None = None, measure: str | None = None,
             job_dir: str | Path | None = None) -> RunRecord:
    """One variant, measured in this process without the Hydra app, by the function a sweep's
    worker runs (selector.variant.run): its RunRecord (record.tasks, .perf, .memory, .status).
    model, precision, evalset, engine, measure: config group options (conf/<group>/<name>.yaml);
    overrides: any other keys, as for `run` but one value each. job_dir: where record.json,
    samples.jsonl and job.json go (default: a new folder under <output_dir>/variants)."""
    from selector.variant.run import evaluate as evaluate_overrides

    groups = {"model": model, "precision": precision, "evalset": evalset, "engine": engine, "measure": measure}
    args = [f"{group}={_value(name)}" for group, name in groups.items() if name is not None]
    return evaluate_overrides(args + as_overrides(overrides), job_dir)


def load(source: str | Path, *, tracking_uri: str | None = None) -> SweepResult:
    """A finished sweep's records and recommendation (under the sweep's own policy), from its folder
    (or a records folder, or a report.json) or from its MLflow parent run id (`tracking_uri`:
    default, the configured tracker's store, ./outputs/mlflow.db)."""
    from selector.sweep import stored

    path = Path(source).expanduser()
    report = ((path / "report") if path.is_dir() else path.parent) if path.exists() else None
    return _result(stored.from_source(source, tracking_uri), report=report)


def latest_sweep(tracking_uri: str | None = None, experiment: str = "selector") -> str:
    """The parent run id of the newest sweep in an MLflow experiment (for selector.load)."""
    from mlflow import MlflowClient

    from selector.compose import compose
    from selector.trackers.mlflow import local_uri

    uri = tracking_uri or compose([]).tracker.tracking_uri or local_uri(Path("outputs"))
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise UserError(f"no MLflow experiment {experiment!r} in {uri}")
    runs = client.search_runs([exp.experiment_id], "tags.`selector.role` = 'sweep'",
                              order_by=["attributes.start_time DESC"], max_results=1)
    if not runs:
        raise UserError(f"no sweep in MLflow experiment {experiment!r} of {uri}")
    return str(runs[0].info.run_id)


# ---- overrides from Python values ----

def as_overrides(overrides: Overrides) -> list[str]:
    """Command-line overrides from a list (as given) or a dict (see `run`)."""
    if overrides is None:
        return []
    if isinstance(overrides, str):
        raise TypeError("overrides: a list of strings (['model=smollm2-135m']) or a dict, not one string")
    if not isinstance(overrides, Mapping):
        return [str(o) for o in overrides]
    out = []
    for key, value in overrides.items():
        if _is_group(key) and isinstance(value, (list, tuple)):
            out.append(f"{key}={','.join(_value(v) for v in value)}")  # a list of choices: sweep them
        else:
            out += _dotted(key, value)
    return out


def _is_group(key: str) -> bool:
    """A config group (model, precision, ..., the sweep presets), whose list value means "sweep these"."""
    return key != "hydra" and "." not in key and (CONF_DIR / key).is_dir()


def policy_overrides(policy: Overrides) -> list[str]:
    """Policy overrides from strings (given as on the command line) or a dict of policy fields."""
    if isinstance(policy, Mapping):
        return _dotted("policy", dict(policy))
    return as_overrides(policy)


def _dotted(key: str, value: Any) -> list[str]:
    if isinstance(value, Mapping):
        if not value:
            return [f"{key}={{}}"]
        return [o for k, v in value.items() for o in _dotted(f"{key}.{k}", v)]
    return [f"{key}={_value(value)}"]


_BARE = re.compile(r"[A-Za-z0-9_./:@+-]+")
_WORDS = {"true", "false", "null", "none", "nan", "inf", "-inf"}


def _value(value: Any) -> str:
    """A Python value in Hydra's override grammar (strings quoted when they would parse as
    something else: spaces, commas, brackets, true/null ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if _BARE.fullmatch(text) and text.lower() not in _WORDS and not _looks_numeric(text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# ---- helpers ----

def _result(sweep: StoredSweep, report: Path | None) -> SweepResult:
    from selector.sweep import reselect, stored

    cfg = stored.sweep_config(sweep)
    selection, _ = reselect.select_again(sweep, cfg, None)
    paths = {}
    if report is not None:
        paths = {fmt: report / name for fmt, name in REPORT_FILES.items() if (report / name).is_file()}
    return SweepResult(records=sweep.records, selection=selection, config=cfg,
                       sweep_dir=sweep.base if sweep.folder else None, report_paths=paths,
                       tracking_uri=sweep.state.tracking_uri or None, parent_run_id=sweep.state.parent_run_id,
                       _stored=sweep)


def _report_dir(sweep: StoredSweep, report: bool | str | Path) -> Path | None:
    import time

    if report is False or report is None:
        return None
    if report is True:
        return sweep.base / f"report-{time.strftime('%Y%m%d-%H%M%S')}"
    return Path(report).expanduser()


@contextlib.contextmanager
def _hydra_in_this_process() -> Iterator[None]:
    """Run the sweep's entry in this process and put back what the Hydra app changes here."""
    from hydra.core.global_hydra import GlobalHydra

    from selector.sweep.state import STATE_ENV
    from selector.variant.evaluation import evalset_of

    state = os.environ.get(STATE_ENV)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    sigterm = signal.getsignal(signal.SIGTERM) if _main_thread() else None
    evalset_of.cache_clear()  # an eval set edited since the last run is read again
    GlobalHydra.instance().clear()
    try:
        yield
    finally:
        GlobalHydra.instance().clear()
        if state is None:
            os.environ.pop(STATE_ENV, None)
        else:
            os.environ[STATE_ENV] = state
        for handler in root.handlers:
            if handler not in handlers:
                root.removeHandler(handler)
                handler.close()  # Hydra's log file in the sweep folder
        for handler in handlers:
            if handler not in root.handlers:
                root.addHandler(handler)
        root.setLevel(level)
        if sigterm is not None:
            signal.signal(signal.SIGTERM, sigterm)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
