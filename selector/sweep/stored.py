"""A finished sweep, read back without touching a model: its records and the config it ran with,
from a sweep folder, a records folder, a report.json or the sweep's MLflow parent run; and its
config again under the sweep's own policy with overrides on top (selector.sweep.reselect selects with
it; selector.sweep.comparison reads each side of a comparison through here).

`selector select` and the Python API (selector.load, SweepResult.select) both go through here.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from selector.config import SelectorConfig
from selector.errors import ConfigError, UserError
from selector.records import RunRecord
from selector.sweep.state import SweepState, has_state, read_state

log = logging.getLogger("selector.sweep.stored")
RUN_ID = re.compile(r"[0-9a-f]{32}")  # an MLflow run id


@dataclass
class StoredSweep:
    records: list[RunRecord]
    config: dict[str, Any] | None  # the sweep's resolved config, when it kept one
    base: Path  # the sweep folder (or where new reports of an MLflow sweep go by default)
    source: str  # what was read, for messages
    state: SweepState = field(default_factory=SweepState)  # tracking_uri / parent_run_id, when known
    folder: bool = True  # read from files (which also hold the samples the report shows), not MLflow


def from_source(source: str | Path, tracking_uri: str | None = None,
                output_dir: str | Path | None = None) -> StoredSweep:
    """A sweep folder, records folder or report.json when the path exists; else an MLflow parent run id."""
    path = Path(source).expanduser()
    if path.exists():
        return from_folder(path)
    if RUN_ID.fullmatch(str(source)):
        return from_mlflow(str(source), tracking_uri, output_dir)
    raise UserError(f"{source}: no such folder, and not an MLflow run id")


def from_folder(source: Path) -> StoredSweep:
    """Records, the sweep's config (when kept) and the folder of a sweep, records folder or report.json."""
    from selector.sweep.judging import gather_records

    source = Path(source)
    if not source.exists():
        raise UserError(f"{source}: no such file or folder")
    if source.is_file():
        try:
            doc = json.loads(source.read_text())
            records = [RunRecord.model_validate(r) for r in doc["records"]]
        except (ValueError, KeyError, TypeError) as e:
            raise UserError(f"{source}: not a report.json with records ({type(e).__name__}: {e})") from None
        return _checked(StoredSweep(records, doc.get("context", {}).get("config"), source.parent, str(source)))
    records = gather_records(source) or [RunRecord.load(p) for p in sorted(source.glob("*.json"))]
    state = read_state(source)
    if not records:
        raise UserError(f"{source}: a sweep folder without variant records (record.json): did it run?"
                        if has_state(source) else
                        f"{source}: not a sweep folder (no sweep.json and no record.json under it)")
    config = state.config
    report = source / "report" / "report.json"
    if config is None and report.exists():
        config = json.loads(report.read_text()).get("context", {}).get("config")
    return _checked(StoredSweep(records, config, source, str(source), state))


def from_mlflow(run_id: str, tracking_uri: str | None = None, output_dir: str | Path | None = None) -> StoredSweep:
    """A sweep's records and config from its MLflow parent run, in whichever experiment it is."""
    from selector.compose import compose
    from selector.trackers import make_tracker

    defaults = compose([])
    if tracking_uri:
        defaults.tracker.tracking_uri = tracking_uri
    out = Path(output_dir or defaults.output_dir)
    probe = make_tracker(defaults.tracker, defaults.experiment, out)
    experiment, started_at = _experiment_of(probe, run_id)
    tracker = make_tracker(defaults.tracker, experiment, out) if experiment != defaults.experiment else probe
    records = tracker.load_records(run_id)
    state = SweepState(tracking_uri=tracker.uri, parent_run_id=run_id, started_at=started_at)
    where = f"MLflow run {run_id} in {tracker.uri}"
    config = tracker.load_sweep_config(run_id)
    return _checked(StoredSweep(records, config, out / "selections" / run_id, where, state, folder=False))


def _experiment_of(tracker: Any, run_id: str) -> tuple[str, float | None]:
    """The name of the experiment a run is in and the run's start (s); a UserError when there is no such run."""
    client = getattr(tracker, "client", None)
    if client is None:  # tracker=none: nothing to read from
        raise UserError(f"MLflow run {run_id}: no MLflow tracker is configured (tracker=none)")
    try:
        run = client.get_run(run_id)
        started = run.info.start_time / 1000 if run.info.start_time else None
        return str(client.get_experiment(run.info.experiment_id).name), started
    except Exception as e:  # MLflow's RestException / MlflowException for an unknown id
        raise UserError(f"MLflow run {run_id}: not found in {tracker.uri} ({type(e).__name__})") from None


def _checked(stored: StoredSweep) -> StoredSweep:
    if not stored.records:
        raise UserError(f"no RunRecords found in {stored.source}")
    return stored


def sweep_config(stored: StoredSweep, policy_overrides: list[str] = ()) -> SelectorConfig:  # type: ignore[assignment]
    """The config the sweep ran with, its policy with these overrides applied (as on a policy file).
    A record's own config says how IT was measured (for a reused record, under another sweep's
    policy): it stands in only for sweeps that kept no config of their own."""
    from selector.compose import config_from_dict, policy_with_overrides

    bad = [o for o in policy_overrides if not o.lstrip("+~").startswith("policy")]
    if bad:
        raise UserError(f"command line: only policy overrides apply to stored records; not {', '.join(bad)}")
    recorded = stored.config
    if recorded is None:
        log.warning("%s keeps no sweep config (an older sweep or a records folder): starting from the policy "
                    "recorded with %s", stored.source, stored.records[0].name)
        recorded = _over_defaults(stored.records[0].config)
    cfg = config_from_dict(recorded)
    cfg.policy = policy_with_overrides(cfg.policy, list(policy_overrides))
    _check_floor_names(cfg, stored.records, list(policy_overrides))
    return cfg


def _over_defaults(partial: dict[str, Any]) -> dict[str, Any]:
    """A record's config over the packaged defaults: records written by other tools or versions may
    hold only part of it (the policy is what matters here)."""
    from omegaconf import OmegaConf

    from selector.compose import compose
    from selector.config import to_dict

    known = {k: v for k, v in partial.items() if k in SelectorConfig.__dataclass_fields__}
    return OmegaConf.to_container(OmegaConf.merge(to_dict(compose([])), known))  # type: ignore[return-value]


def _check_floor_names(cfg: SelectorConfig, records: list[RunRecord], overrides: list[str]) -> None:
    """A floor given here must name a task the records measured (a typo would fail every variant)."""
    from selector.compose import given_keys
    from selector.selection.checks import validate_policy
    from selector.sweep.floors import check_floor_tasks

    given = given_keys(overrides)
    measured = sorted({t for r in records for t in r.tasks})
    asked = {t: f for t, f in cfg.policy.floors.items() if f"policy.floors.{t}" in given or "policy.floors" in given}
    probe = type(cfg.policy)(floors=asked)
    check_floor_tasks(probe, None, measured, measured, lambda task: "command line", "of these records")
    try:
        validate_policy(cfg.policy)
    except ConfigError as e:
        raise ConfigError("command line" if f"policy.{e.field}" in given else "the sweep's recorded policy",
                          f"policy.{e.field}", e.problem) from None
    _check_deploy(cfg, records, given)


def _check_deploy(cfg: SelectorConfig, records: list[RunRecord], given: Any) -> None:
    """policy.deploy_engine in one spelling per engine, as the sweep's preflight checks it, against
    the engines these records ran on (selector.engines.check_deploy_engine)."""
    from selector.engines import check_deploy_engine
    from selector.selection.summary import record_engine

    engines = [e for r in records if (e := record_engine(r)) is not None]
    problem = check_deploy_engine(cfg.policy.deploy_engine, engines)
    if problem:
        raise ConfigError("command line" if "policy.deploy_engine" in given else "the sweep's recorded policy",
                          "policy.deploy_engine", problem)

