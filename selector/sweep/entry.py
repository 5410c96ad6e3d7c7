"""Where every sweep starts, from the command line (`selector ...`) and from `selector.run` alike.

The overrides are checked and the sweep's first job composed before Hydra starts (a bad key or
value stops here, with its file and line), then the Hydra app runs on the overrides as given, the
way `@hydra.main` runs it on `sys.argv` but without touching `sys.argv`: Hydra's own flags
(`--help`, `--cfg job`, `-m`) work the same from both callers.
"""

from __future__ import annotations

from collections.abc import Sequence

from selector.paths import CONF_DIR


def run_sweep(overrides: Sequence[str]) -> None:
    """Run the sweep (or the single job) these command-line overrides describe, in this process.
    Bad input raises UserError; Hydra's own usage errors and a broken sweep exit as it does."""
    from hydra import version
    from hydra._internal.utils import _run_hydra, get_args_parser

    from selector import compose
    from selector.sweep.task import run_job

    args = list(overrides)
    compose.check_group_choices(args)
    compose.compose(compose.first_job(args))
    version.setbase("1.3")
    parser = get_args_parser()
    _run_hydra(args=parser.parse_args(compose.normalize(args)), args_parser=parser, task_function=run_job,
               config_path=str(CONF_DIR), config_name="config")
