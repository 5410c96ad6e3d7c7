"""`python -m selector sync --from <uri> --to <uri>`: copy recorded sweeps between MLflow stores."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from selector.errors import UserError
from selector.trackers.sync import sync


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m selector sync",
        description="Copy recorded sweeps from one MLflow store to another, e.g. a local fallback store "
                    "to the shared tracking server once it is reachable again. Safe to repeat: runs "
                    "copied before are skipped.",
        epilog="Example:\n  python -m selector sync --from sqlite:///outputs/mlflow.db --to http://mlflow.internal:5000",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--from", dest="source", required=True, help="source tracking URI (e.g. sqlite:///outputs/mlflow.db)")
    parser.add_argument("--to", dest="dest", required=True, help="destination tracking URI (e.g. http://host:5000)")
    parser.add_argument("--experiment", action="append", help="copy only this experiment (repeatable)")
    args = parser.parse_args(argv)
    from selector.logs import setup_logging

    setup_logging()
    if args.source.startswith("sqlite:///") and not Path(args.source[len("sqlite:///"):]).is_file():
        raise UserError(f"sync: {args.source}: no such database file")
    try:
        result = sync(args.source, args.dest, args.experiment)
    except UserError:
        raise
    except Exception as e:  # MlflowException: a store that cannot be reached or read
        print(f"error: sync failed: {str(e).strip().splitlines()[0][:500]}", file=sys.stderr)
        return 1
    print(f"copied {len(result.copied)} run(s) of {', '.join(result.experiments) or 'no experiment'} "
          f"from {args.source} to {args.dest}; {result.skipped_existing} already there"
          + (f"; {result.skipped_running} still running (sync again when they end)" if result.skipped_running else ""))
    return 0
