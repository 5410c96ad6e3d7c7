"""`python -m selector`: the Hydra sweep app, plus sub-commands that never load a model.

  python -m selector [overrides]        run a sweep (default: the offline ladder x default precisions)
  python -m selector list               models, precisions, eval sets and what can run here
  python -m selector select ...         re-run selection + report from stored records or MLflow
  python -m selector plan [overrides]   the grid a sweep would run, with memory estimates per variant
  python -m selector sync --from --to   copy sweeps between MLflow stores (local fallback -> server)
  python -m selector evalset ...        import / export lm-evaluation-harness tasks
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path
from selector.config import CONF_DIR
from selector.errors import UserError

SUBCOMMANDS = ("list", "select", "plan", "sync", "evalset")


def _hydra_entry() -> None:
    import hydra

    from selector.app import run_job

    hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")(run_job)()


def _config_dirs(parsed: list) -> list[Path]:  # type: ignore[type-arg]
    """conf/ plus the user's own config folders given with hydra.searchpath=[file://...]."""
    dirs = [CONF_DIR]
    for o in parsed:
        if o.key_or_group == "hydra.searchpath":
            value = o.value()
            for entry in value if isinstance(value, list) else [value]:
                if str(entry).startswith("file://"):
                    dirs.append(Path(str(entry)[len("file://"):]))
    return dirs


def check_group_choices(argv: list[str]) -> None:
    """Unknown model/precision/... names stop here with a did-you-mean, before Hydra starts."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides = [a for a in argv if "=" in a and not a.startswith("-")]
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception as e:
        raise UserError(f"command line: cannot parse the overrides: {e}") from None
    dirs = _config_dirs(parsed)
    for o in parsed:
        group = o.key_or_group
        if "." in group or not (CONF_DIR / group).is_dir() or o.is_delete():
            continue
        values = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.get_value_element_as_str()]
        known = sorted({p.stem for d in dirs for p in (d / group).glob("*.yaml")})
        for value in values:
            if value not in known:
                close = difflib.get_close_matches(value, known, n=3)
                hint = f" Did you mean {', '.join(close)}?" if close else ""
                raise UserError(
                    f"command line: {group}={value}: there is no conf/{group}/{value}.yaml.{hint} "
                    f"Known {group} names: {', '.join(known)}. "
                    f"Add your own as conf/{group}/<name>.yaml (see `python -m selector list`)."
                )


def check_composes(argv: list[str]) -> None:
    """Compose the sweep's first job now, so a bad key or value is a usage error (exit 2) with
    Hydra's own explanation, instead of a failure after start-up."""
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides = [a for a in argv if not a.startswith("-") and "=" in a]
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception as e:
        raise UserError(f"command line: cannot parse the overrides: {e}") from None
    first = []
    for raw, o in zip(overrides, parsed):
        if o.key_or_group.startswith("hydra.") and not o.key_or_group.startswith("hydra.searchpath"):
            continue
        if o.is_sweep_override():
            prefix = raw.split("=", 1)[0]
            first.append(f"{prefix}={next(iter(o.sweep_string_iterator()))}")
        else:
            first.append(raw)
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            compose("config", overrides=first)
    except Exception as e:
        raise UserError(compose_error(e, _config_dirs(parsed))) from None


def compose_error(e: Exception, dirs: list[Path]) -> str:
    """Hydra's composition error as one line that names where the bad value came from: a config
    file and line ("In 'model/x'", "Error merging 'model/x'") or the command line (an override)."""
    import re

    from selector.config import yaml_line

    cause = getattr(e, "__cause__", None)
    text = " ".join(f"{e} {cause or ''}".split())
    key = getattr(cause, "full_key", "") or (re.search(r"full_key: (\S+)", text) or [None, ""])[1]
    reason = re.search(r"(Value '.*?' .*?could not be converted to \w+|Key '\w+' not in '\w+')", text)
    detail = reason.group(1) if reason else text.split(" full_key:")[0]
    found = re.search(r"(?:In|Error merging) '([\w.-]+)/([\w.-]+)'", text)
    if found and key:
        group, name = found.groups()
        path = next((d / group / f"{name}.yaml" for d in dirs if (d / group / f"{name}.yaml").exists()), None)
        if path is not None:
            line = yaml_line(path, key.split(".")[1:])
            return f"{path}{f':{line}' if line else ''}: field '{key}': {detail}"
    return f"command line: {detail}" + (f" (field '{key}')" if key and key not in detail else "")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SUBCOMMANDS:
        from selector import commands

        sys.exit(getattr(commands, f"cmd_{argv[0]}")(argv[1:]))
    try:
        check_group_choices(argv)
        check_composes(argv)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    sys.argv = [sys.argv[0], *argv]
    try:
        _hydra_entry()
    except KeyboardInterrupt:
        print("\ninterrupted: the running variant was stopped and its MLflow runs marked KILLED; "
              "run the same command again to resume (finished variants are not measured again).", file=sys.stderr)
        sys.exit(130)
