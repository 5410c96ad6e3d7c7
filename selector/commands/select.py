"""`python -m selector select`: selection and a new report from stored records, no model touched."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from selector.errors import ConfigError, UserError


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
    from selector.compose import compose, config_from_dict, policy_with_overrides
    from selector.sweep.end import report_context, select_and_report
    from selector.report import print_terminal_summary

    bad = [o for o in args.overrides if not o.lstrip("+~").startswith("policy")]
    if bad:
        raise UserError(f"command line: select takes only policy overrides; not {', '.join(bad)}")
    if args.mlflow_run:
        from selector.trackers import make_tracker

        defaults = compose([])
        if args.tracking_uri:
            defaults.tracker.tracking_uri = args.tracking_uri
        tracker = make_tracker(defaults.tracker, defaults.experiment, defaults.output_dir)
        records = tracker.load_records(args.mlflow_run)
        recorded = tracker.load_sweep_config(args.mlflow_run)
        base = Path(defaults.output_dir) / "selections" / args.mlflow_run
        state = {"tracking_uri": tracker.uri, "parent_run_id": args.mlflow_run}
    else:
        records, recorded, base = _stored(args.source)
        state = {}
    if not records:
        raise UserError(f"no RunRecords found in {args.mlflow_run or args.source}")
    if recorded is None:
        print(f"note: {args.mlflow_run or args.source} keeps no sweep config (an older sweep or a records folder): "
              f"starting from the policy recorded with {records[0].name}", file=sys.stderr)
        recorded = records[0].config
    cfg = config_from_dict(recorded)  # the sweep's own policy, with the overrides on top
    cfg.policy = policy_with_overrides(cfg.policy, args.overrides)
    _check_floor_names(cfg, records, args.overrides)
    from selector.report.samples import load_samples

    samples = load_samples(base) if not args.mlflow_run else None  # the outputs shown in the report
    out = args.out or base / f"report-{time.strftime('%Y%m%d-%H%M%S')}"
    context = report_context(cfg, state, base, 0.0)
    if cfg.compare_to:  # the sweep named a predecessor: the new report compares with it too
        from selector.report.compare import Side
        from selector.sweep.end import compare_with

        from selector.sweep.state import read_state

        kept = read_state(base) if not args.mlflow_run else state
        context["comparison"] = compare_with(cfg, Side(str(args.mlflow_run or args.source), records, recorded,
                                                       kept.get("parent_run_id"), started_at=kept.get("started_at")))
    selection, paths = select_and_report(records, cfg, context, out, samples)
    print_terminal_summary(records, selection)
    partial = [r for r in records if r.status in ("stopped", "not_needed")]
    if partial:
        print("\nPartial evidence: an adaptive search stopped or skipped these under the sweep's own floors; "
              "under other floors they may pass. Re-run the sweep with the new floors (or search=grid) in the same "
              "output folder to measure them: only the items not yet scored are scored.")
        for r in partial:
            seen = f"{r.search.items_evaluated} of {r.search.items_total} items" if r.search else "not measured"
            print(f"  {r.name}: {seen} ({r.status.replace('_', ' ')})")
    print(f"\nReport: {paths['html']}")
    return 0


def _stored(source: Path) -> tuple[list, dict | None, Path]:  # type: ignore[type-arg]
    """Records, the sweep's config (when kept) and the folder of a sweep, records folder or report.json."""
    import json

    from selector.sweep.end import gather_records
    from selector.sweep.state import read_state
    from selector.types import RunRecord

    if not source.exists():
        raise UserError(f"{source}: no such file or folder")
    if source.is_file():
        doc = json.loads(source.read_text())
        records = [RunRecord.model_validate(r) for r in doc["records"]]
        return records, doc.get("context", {}).get("config"), source.parent
    records = gather_records(source) or [RunRecord.load(p) for p in sorted(source.glob("*.json"))]
    config = read_state(source).get("config")
    report = source / "report" / "report.json"
    if config is None and report.exists():
        config = json.loads(report.read_text()).get("context", {}).get("config")
    return records, config, source


def _check_floor_names(cfg, records: list, overrides: list[str]) -> None:  # type: ignore[no-untyped-def, type-arg]
    """A floor given here must name a task the records measured (a typo would fail every variant)."""
    from selector.compose import given_keys
    from selector.sweep.floors import check_floor_tasks
    from selector.selection.checks import validate_policy

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
