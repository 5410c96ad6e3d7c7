"""`python -m selector`: the Hydra sweep app, plus sub-commands that never load a model.

  python -m selector [overrides]        run a sweep (default: the offline ladder x default precisions)
  python -m selector list               models, precisions, eval sets and what can run here
  python -m selector select ...         re-run selection + report from stored records or MLflow
  python -m selector plan [overrides]   the grid a sweep would run, with memory estimates per variant
  python -m selector sync --from --to   copy sweeps between MLflow stores (local fallback -> server)
  python -m selector evalset ...        import / export lm-evaluation-harness tasks
  python -m selector compare A B        two sweeps side by side: config changes, what moved beyond noise
"""

from __future__ import annotations

import sys

from selector.errors import UsageExit, UserError


def command() -> None:
    """`selector` and `python -m selector`: main() in a process of its own, which ends quickly."""
    from selector.processes import skip_exit_collection

    try:
        main()
    finally:
        skip_exit_collection()


def main(argv: list[str] | None = None) -> None:
    """Every command's bad input ends here, as one line and exit code 2 (errors.UserError)."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        sys.exit(run_argv(argv))
    except (UserError, UsageExit) as e:
        error = e.error if isinstance(e, UsageExit) else e
        print(f"error: {error}", file=sys.stderr)
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        print("\ninterrupted: the running variant was stopped and its MLflow runs marked KILLED; "
              "run the same command again to resume (finished variants are not measured again).", file=sys.stderr)
        sys.exit(130)


def run_argv(argv: list[str]) -> int:
    """One command line, run in this process; bad input raises (UserError, or UsageExit carrying one
    from inside Hydra). A sweep starts where selector.run starts it too (selector.sweep.entry)."""
    from selector import commands

    if argv and argv[0] in commands.COMMANDS:
        return commands.run(argv[0], argv[1:])
    from selector.sweep.entry import run_sweep

    run_sweep(argv)
    return 0
