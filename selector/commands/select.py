"""`python -m selector select`: selection and a new report from stored records, no model touched."""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    """Re-run selection and write a new report from stored records, without touching a model."""
    parser = argparse.ArgumentParser(
        prog="python -m selector select",
        description=main.__doc__,
        epilog="Examples:\n"
        "  python -m selector select --from outputs/sweeps/2026-11-30_10-00-00 policy.rule=lower_bound\n"
        "  python -m selector select --mlflow-run <parent run id> policy.floors.arithmetic=0.5\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--from", dest="source", type=Path, help="a sweep folder, a records folder or a report.json")
    src.add_argument("--mlflow-run", help="the sweep's parent run id in MLflow")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: the configured tracker's)")
    parser.add_argument("--out", type=Path, help="where to write the new report (default: next to the source)")
    parser.add_argument("overrides", nargs="*", help="policy overrides, e.g. policy=strict policy.floors.code=0.6")
    return _select(parser.parse_args(argv))


def _select(args: argparse.Namespace) -> int:
    from selector.report import print_terminal_summary
    from selector.sweep import reselect, stored

    if args.mlflow_run:
        sweep = stored.from_mlflow(args.mlflow_run, args.tracking_uri)
    else:
        sweep = stored.from_folder(args.source)
    cfg = stored.sweep_config(sweep, args.overrides)  # the sweep's own policy, with the overrides on top
    out = args.out or sweep.base / f"report-{time.strftime('%Y%m%d-%H%M%S')}"
    selection, paths = reselect.select_again(sweep, cfg, out)
    print_terminal_summary(sweep.records, selection)
    partial = [r for r in sweep.records if r.status in ("stopped", "not_needed")]
    if partial:
        print("\nPartial evidence: an adaptive search stopped or skipped these under the sweep's own floors; "
              "under other floors they may pass. Re-run the sweep with the new floors (or search=grid) in the same "
              "output folder to measure them: only the items not yet scored are scored.")
        for r in partial:
            seen = f"{r.search.items_evaluated} of {r.search.items_total} items" if r.search else "not measured"
            print(f"  {r.name}: {seen} ({r.status.replace('_', ' ')})")
    print(f"\nReport: {paths['html']}")
    return 0
