"""From overrides to a validated config: the one place every command composes through Hydra.

`python -m selector`, `select`, `plan` and `list` all read the command line the same way:
- unknown group choices stop with a did-you-mean (`model=smolm2` -> smollm2-135m);
- keys under a map of the schema (`policy.floors.<task>`, `measure.load.slo.<name>`, ...) can be
  set without Hydra's `+`, because a map's keys are the user's own names (task names, SLO names);
- any composition error becomes one line naming the file, line and field (or the command line).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from selector.config import CONF_DIR, SelectorConfig
from selector.validate import validate
from selector.errors import UserError
from selector.origin import Origin, file_line


def _map_fields(cls: type, prefix: str = "") -> list[str]:
    """Dotted paths of the schema's dict-valued fields (maps whose keys the user names)."""
    found = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        origin = typing.get_origin(hint)
        if origin is dict:
            found.append(f"{prefix}{f.name}")
        elif dataclasses.is_dataclass(hint):
            found += _map_fields(hint, f"{prefix}{f.name}.")
    return found


MAP_FIELDS = tuple(_map_fields(SelectorConfig))


def _parse(overrides: list[str]) -> list[Any]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return OverridesParser.create().parse_overrides(overrides)
    except Exception as e:
        raise UserError(f"command line: cannot parse the overrides: {_one_line(e)}") from None


def normalize(overrides: list[str]) -> list[str]:
    """`policy.floors.my_task=0.9` -> `++policy.floors.my_task=0.9`: set or add a key of a map
    (and `policy.floors={a: 0.9}` merges those keys into the map, as Hydra merges any mapping).

    Hydra's struct mode refuses a new key without '+', and '+' refuses a key that exists; '++'
    does both, which is what a user means by `policy.floors.<task>=...`."""
    out = []
    for raw in overrides:
        if raw.startswith(("+", "~", "-")) or "=" not in raw:
            out.append(raw)
            continue
        key = raw.split("=", 1)[0]
        parent = key.rsplit(".", 1)[0] if "." in key else ""
        # engine.*: each engine kind has settings of its own, typed and checked (with a
        # did-you-mean) by selector.validate rather than refused by Hydra's struct mode.
        mine = key in MAP_FIELDS or parent in MAP_FIELDS or key.startswith("engine.")
        out.append(f"++{raw}" if mine else raw)
    return out


def config_dirs(overrides: list[str]) -> list[Path]:
    """conf/ plus the user's own config folders given with hydra.searchpath=[file://...]."""
    dirs = [CONF_DIR]
    for o in _parse([a for a in overrides if "=" in a and not a.startswith("-")]):
        if o.key_or_group == "hydra.searchpath":
            value = o.value()
            for entry in value if isinstance(value, list) else [value]:
                if str(entry).startswith("file://"):
                    dirs.append(Path(str(entry)[len("file://"):]))
    return dirs


def known_choices(group: str, dirs: list[Path]) -> list[str]:
    return sorted({p.stem for d in dirs for p in (d / group).glob("*.yaml")})


def check_group_choices(overrides: list[str]) -> None:
    """Unknown model/precision/... names stop here with a did-you-mean, before Hydra starts."""
    overrides = [a for a in overrides if "=" in a and not a.startswith("-")]
    dirs = config_dirs(overrides)
    for o in _parse(overrides):
        group = o.key_or_group
        if "." in group or not (CONF_DIR / group).is_dir() or o.is_delete():
            continue
        values = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.get_value_element_as_str()]
        known = known_choices(group, dirs)
        for value in values:
            _not_shadowed(group, value, dirs)
            if value not in known:
                close = difflib.get_close_matches(value, known, n=3)
                hint = f" Did you mean {', '.join(close)}?" if close else ""
                adhoc = (" Or name a model without a YAML file: model=path model.path=DIR, "
                         "model=gguf model.path=FILE.gguf, model=hub model.repo_id=ORG/NAME.") if group == "model" else ""
                raise UserError(
                    f"command line: {group}={value}: there is no conf/{group}/{value}.yaml.{hint} "
                    f"Known {group} names: {', '.join(known)}. "
                    f"Add your own as my_conf/{group}/<name>.yaml with hydra.searchpath=[file:///abs/path/my_conf] "
                    f"(see `selector list`).{adhoc}"
                )


def _not_shadowed(group: str, value: str, dirs: list[Path]) -> None:
    """Hydra searches the packaged conf/ before the user's folders, so a user's file named like a
    packaged one would be silently ignored: say so instead."""
    if not (CONF_DIR / group / f"{value}.yaml").is_file():
        return
    for d in dirs[1:]:
        mine = d / group / f"{value}.yaml"
        if mine.is_file():
            raise UserError(f"{mine}: a packaged config has the same name ({group}={value}), and Hydra would load "
                            f"that one instead: rename yours (e.g. {group}/my-{value}.yaml) and choose {group}=my-{value}")


def first_job(overrides: list[str]) -> list[str]:
    """The overrides of a sweep's first job: every sweep (a,b,c) replaced by its first value."""
    keep = [a for a in overrides if not a.startswith("-") and "=" in a]
    first = []
    for raw, o in zip(keep, _parse(keep)):
        if o.key_or_group.startswith("hydra.") and not o.key_or_group.startswith("hydra.searchpath"):
            continue
        if o.is_sweep_override():
            first.append(f"{raw.split('=', 1)[0]}={next(iter(o.sweep_string_iterator()))}")
        else:
            first.append(raw)
    return first


def compose_raw(overrides: list[str]) -> Any:
    """Hydra's composed DictConfig (without the hydra node) and the group choices it made."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    overrides = normalize(overrides)
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose("config", overrides=overrides, return_hydra_config=True)
    except Exception as e:
        raise UserError(compose_error(e, config_dirs(overrides))) from None
    choices = dict(OmegaConf.to_container(cfg.hydra.runtime.choices))  # type: ignore[arg-type]
    plain = OmegaConf.create({k: v for k, v in cfg.items() if k != "hydra"})
    return plain, choices


def compose(overrides: list[str]) -> SelectorConfig:
    """The validated config for these overrides, composed the way a sweep composes its first job."""
    plain, choices = compose_raw(overrides)
    return validate(plain, origin_of(overrides, choices))


def origin_of(overrides: list[str], choices: dict[str, str], dirs: Sequence[Path] | None = None) -> Origin:
    """Where a job's values came from: its group choices, the keys its overrides set, and the
    user's config folders (`dirs`, else those its overrides name with hydra.searchpath)."""
    user_dirs = tuple(dirs) if dirs is not None else tuple(config_dirs(overrides)[1:])
    return Origin(choices, given_keys(overrides), user_dirs)


def given_keys(overrides: list[str]) -> frozenset[str]:
    """The dotted keys these overrides set (not group choices), for error messages."""
    keys = (a.split("=", 1)[0].lstrip("+~") for a in overrides if "=" in a and not a.startswith("-"))
    return frozenset(k for k in keys if "." in k or k in SelectorConfig.__dataclass_fields__)


def grid_overrides(config: Any) -> list[list[str]]:
    """The override list of each job of a sweep, in launch order: `hydra.sweeper.params` and the
    command line, every a,b,c sweep expanded into the grid (the later of two values of a key wins,
    the command line's over the config's), as Hydra's basic sweeper does."""
    import itertools

    from omegaconf import OmegaConf

    params = OmegaConf.select(config, "hydra.sweeper.params") or {}
    args = [f"{k}={v}" for k, v in params.items()] + list(config.hydra.overrides.task)
    axes: dict[str, list[str]] = {}
    for o in _parse(args):
        key = o.get_key_element()
        if o.is_sweep_override():
            axes[key] = [f"{key}={v}" for v in o.sweep_string_iterator()]
        else:
            axes[key] = [f"{key}={o.get_value_element_as_str()}"]
    return [list(job) for job in itertools.product(*axes.values())]


def compose_job(master: Any, overrides: list[str]) -> tuple[Any, dict[str, str]]:
    """One job of a sweep whose master config Hydra has loaded, with the group choices it made."""
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    loader = GlobalHydra.instance().config_loader()
    try:
        job = loader.load_sweep_config(master, overrides)
    except Exception as e:  # Hydra's "Could not find 'model/x'" and friends
        raise UserError(compose_error(e, config_dirs(overrides))) from None
    choices = dict(OmegaConf.to_container(job.hydra.runtime.choices))  # type: ignore[arg-type]
    return job, choices


def compose_grid(overrides: list[str]) -> list[tuple[Any, dict[str, str], list[str]]]:
    """Every job a sweep with these overrides would run: (its config, its group choices, its
    overrides), composed as the sweep composes them (for commands that plan without running)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    check_group_choices(overrides)
    overrides = normalize(overrides)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        try:
            master = loader.load_configuration("config", overrides, run_mode=RunMode.MULTIRUN)
        except Exception as e:
            raise UserError(compose_error(e, config_dirs(overrides))) from None
        jobs = []
        for job in grid_overrides(master):
            cfg, choices = compose_job(master, job)
            jobs.append((OmegaConf.create({k: v for k, v in cfg.items() if k != "hydra"}), choices, job))
        return jobs


RECORDED_POLICY = "_sweep_recorded"


def policy_with_overrides(recorded: Any, overrides: list[str]) -> Any:
    """A stored policy (a sweep's) with command-line overrides applied through Hydra, exactly as
    they would apply to a policy file; `policy=NAME` starts from that file instead."""
    import tempfile

    import yaml

    from selector.config import to_dict

    chooses = any(o.split("=", 1)[0].lstrip("+~") == "policy" for o in overrides)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "policy").mkdir()
        (Path(tmp) / "policy" / f"{RECORDED_POLICY}.yaml").write_text(yaml.safe_dump(to_dict(recorded), sort_keys=False))
        start = [] if chooses else [f"policy={RECORDED_POLICY}"]
        cfg = compose([f"hydra.searchpath=[file://{tmp}]", *start, *overrides])
    return cfg.policy


def config_from_dict(data: dict[str, Any]) -> SelectorConfig:
    """A config stored as plain data (a job file, a RunRecord, sweep.json) back into the schema;
    keys a newer or older selector wrote that this schema lacks are left out."""
    from omegaconf import OmegaConf

    from selector.validate import typed_engine

    known = {k: v for k, v in data.items() if k in SelectorConfig.__dataclass_fields__}
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(SelectorConfig), known))
    assert isinstance(cfg, SelectorConfig)
    cfg.engine = typed_engine(cfg.engine)
    return cfg


def precision_from_dict(data: dict[str, Any]) -> Any:
    """A precision config stored as plain data (a job file) back into its schema."""
    from omegaconf import OmegaConf

    from selector.config import PrecisionConfig

    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(PrecisionConfig), data))


def compose_error(e: Exception, dirs: list[Path]) -> str:
    """Hydra's composition error as one line that names where the bad value came from: a config
    file and line ("In 'model/x'", "Error merging 'model/x'") or the command line (an override)."""
    cause = getattr(e, "__cause__", None)
    text = " ".join(f"{e} {cause or ''}".split())
    key = getattr(cause, "full_key", "") or (re.search(r"full_key: (\S+)", text) or [None, ""])[1]
    reason = re.search(r"(Value '.*?' .*?could not be converted to \w+|Key '\w+' not in '\w+')", text)
    detail = reason.group(1) if reason else text.split(" full_key:")[0]
    found = re.search(r"(?:In|Error merging) '([\w.-]+)/([\w.-]+)'", text)
    if found and key:
        group, name = found.groups()
        path = Origin(dirs=tuple(dirs[1:])).find(group, name)
        if path is not None:
            return f"{file_line(path, key.split('.')[1:])}: field '{key}': {detail}"
    merging = re.search(r"Error merging override (\S+)", text)
    if merging and not reason:
        value = merging.group(1).lstrip("+~")
        detail = f"cannot apply {value}: {_one_line(cause) if cause else 'the value does not fit the field'}"
    return f"command line: {detail}" + (f" (field '{key}')" if key and key not in detail else "")


def _one_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    return lines[0] if lines else type(e).__name__
