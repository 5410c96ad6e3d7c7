"""Sub-commands that never load a model: `list`, `select`, `plan`, `sync` and `evalset`."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from selector.config import CONF_DIR
from selector.errors import ConfigError, UserError


def cmd_list(argv: list[str]) -> int:
    """Print models, precisions and eval sets, and whether each can run on this machine."""
    parser = argparse.ArgumentParser(prog="python -m selector list", description=cmd_list.__doc__)
    parser.parse_args(argv)
    from rich.console import Console
    from rich.table import Table

    from selector import preflight
    from selector.compose import compose
    from selector.logs import setup_logging

    setup_logging(logging.WARNING)
    console = Console()
    cuda = preflight.cuda_available()
    console.print(f"[bold]This machine:[/] {'CUDA GPU available' if cuda else 'no CUDA GPU (CPU only)'}")

    models = Table(title="Models (model=NAME)", show_lines=False)
    for col in ("name", "size", "source", "prompts", "runs here?"):
        models.add_column(col)
    for path in sorted((CONF_DIR / "model").glob("*.yaml")):
        cfg = compose([f"model={path.stem}"])
        ok, why = preflight.availability(cfg)
        src = cfg.model.source
        where = src.repo_id or src.path or ", ".join(src.packages[:1]) + (" ..." if len(src.packages) > 1 else "")
        models.add_row(path.stem, f"{cfg.model.params_b:g}B", f"{src.kind}: {where}", cfg.model.prompt_style,
                       _runs_here(ok, why, f"model={path.stem}"))
    console.print(models)

    precisions = Table(title="Precisions (precision=NAME)")
    for col in ("name", "backend", "what it is", "runs here?"):
        precisions.add_column(col)
    for path in sorted((CONF_DIR / "precision").glob("*.yaml")):
        cfg = compose([f"precision={path.stem}", "model=smollm2-135m"])
        ok, why = preflight.availability(cfg)
        precisions.add_row(path.stem, cfg.precision.backend, cfg.precision.description,
                           _runs_here(ok, why, f"precision={path.stem}"))
    console.print(precisions)

    evalsets = Table(title="Eval sets (evalset=NAME, or evalset.path=FOLDER)")
    for col in ("name", "path", "tasks (items)"):
        evalsets.add_column(col)
    for path in sorted((CONF_DIR / "evalset").glob("*.yaml")):
        cfg = compose([f"evalset={path.stem}"])
        try:
            tasks, _ = preflight.load_tasks(cfg)
            summary = ", ".join(f"{t.name} ({len(t.items)})" for t in tasks)
        except UserError as e:
            summary = f"cannot load: {e}"
        evalsets.add_row(path.stem, cfg.evalset.path, summary)
    console.print(evalsets)
    for group in ("engine", "tracker", "policy", "measure", "calibration", "sweep"):
        names = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
        prefix = "+" if group == "sweep" else ""
        console.print(f"[bold]{group}:[/] " + ", ".join(f"{prefix}{group}={n}" for n in names))
    return 0


def _runs_here(ok: bool, why: str, subject: str) -> str:
    """'yes', or 'no: <reason>' without repeating the row's own name."""
    if ok:
        return "yes"
    for prefix in (f"{subject}: ", f"{subject} is not available on cpu: ", f"{subject} "):
        why = why.removeprefix(prefix)
    return f"no: {why}"


def cmd_select(argv: list[str]) -> int:
    """Re-run selection and write a new report from stored records, without touching a model."""
    parser = argparse.ArgumentParser(
        prog="python -m selector select",
        description=cmd_select.__doc__,
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
    args = parser.parse_args(argv)
    try:
        return _select(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code


def _select(args: argparse.Namespace) -> int:
    from selector.compose import compose, config_from_dict, policy_with_overrides
    from selector.finish import report_context, select_and_report
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
    selection, paths = select_and_report(records, cfg, context, out, samples)
    print_terminal_summary(records, selection)
    print(f"\nReport: {paths['html']}")
    return 0


def _stored(source: Path) -> tuple[list, dict | None, Path]:  # type: ignore[type-arg]
    """Records, the sweep's config (when kept) and the folder of a sweep, records folder or report.json."""
    import json

    from selector.finish import gather_records, read_state
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
    from selector.floors import check_floor_tasks
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


def cmd_plan(argv: list[str]) -> int:
    """Print the grid a sweep would run, with memory estimates and whether each variant fits a GPU."""
    from selector import planning

    try:
        return planning.main(argv)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code


def cmd_sync(argv: list[str]) -> int:
    """Copy recorded sweeps from one MLflow store to another (a local fallback store to the server)."""
    from selector import sync

    return sync.main(argv)


def cmd_evalset(argv: list[str]) -> int:
    """Import lm-evaluation-harness tasks into an eval set, or export one for lm-eval."""
    from selector.tasks import lmeval_cli

    return lmeval_cli.main(argv)
