"""`python -m selector`: the Hydra sweep app, plus sub-commands that never load a model.

  python -m selector [overrides]        run a sweep (default: the offline ladder x default precisions)
  python -m selector list               models, precisions, eval sets and what can run here
  python -m selector select ...         re-run selection + report from stored records or MLflow
  python -m selector plan [overrides]   the grid a sweep would run, with memory estimates per variant
  python -m selector sync --from --to   copy sweeps between MLflow stores (local fallback -> server)
"""

from __future__ import annotations

import difflib
import sys
from selector.config import CONF_DIR
from selector.errors import UserError

SUBCOMMANDS = ("list", "select", "plan", "sync")


def _hydra_entry() -> None:
    import hydra

    from selector.app import run_job

    hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")(run_job)()


def check_group_choices(argv: list[str]) -> None:
    """Unknown model/precision/... names stop here with a did-you-mean, before Hydra starts."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides = [a for a in argv if "=" in a and not a.startswith("-")]
    if any(a.startswith(("hydra.searchpath", "--config-dir", "-cd")) for a in argv):
        return  # the user brings their own config folders: Hydra checks those
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception as e:
        raise UserError(f"command line: cannot parse the overrides: {e}") from None
    for o in parsed:
        group = o.key_or_group
        folder = CONF_DIR / group
        if "." in group or not folder.is_dir() or o.is_delete():
            continue
        values = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.get_value_element_as_str()]
        known = sorted(p.stem for p in folder.glob("*.yaml"))
        for value in values:
            if value not in known:
                close = difflib.get_close_matches(value, known, n=3)
                hint = f" Did you mean {', '.join(close)}?" if close else ""
                raise UserError(
                    f"command line: {group}={value}: there is no conf/{group}/{value}.yaml.{hint} "
                    f"Known {group} names: {', '.join(known)}. "
                    f"Add your own as conf/{group}/<name>.yaml (see `python -m selector list`)."
                )


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SUBCOMMANDS:
        from selector import commands

        sys.exit(getattr(commands, f"cmd_{argv[0]}")(argv[1:]))
    try:
        check_group_choices(argv)
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
