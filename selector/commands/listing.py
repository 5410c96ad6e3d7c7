"""`python -m selector list`: models, precisions, eval sets, and whether each can run here."""

from __future__ import annotations

import argparse
import logging

from selector.config import CONF_DIR
from selector.errors import UserError
from selector.models.adhoc import ADHOC


def main(argv: list[str]) -> int:
    """Print models, precisions and eval sets, and whether each can run on this machine."""
    parser = argparse.ArgumentParser(prog="python -m selector list", description=main.__doc__)
    parser.parse_args(argv)
    from rich.console import Console
    from rich.table import Table

    from selector.compose import compose
    from selector.variant.evaluation import load_tasks
    from selector.variant.availability import availability, cuda_available
    from selector.logs import setup_logging
    from selector.report.console import print_fitted

    setup_logging(logging.WARNING)
    console = Console()
    cuda = cuda_available()
    console.print(f"[bold]This machine:[/] {'CUDA GPU available' if cuda else 'no CUDA GPU (CPU only)'}")

    models = Table(title="Models (model=NAME)", show_lines=False)
    for col in ("name", "size", "source", "prompts", "runs here?"):
        models.add_column(col)
    for path in sorted((CONF_DIR / "model").glob("*.yaml")):
        if path.stem in ADHOC:  # templates for a model named on the command line, listed below
            continue
        cfg = compose([f"model={path.stem}"])
        ok, why = availability(cfg)
        src = cfg.model.source
        where = src.repo_id or src.path or ", ".join(src.packages[:1]) + (" ..." if len(src.packages) > 1 else "")
        models.add_row(path.stem, f"{cfg.model.params_b:g}B", f"{src.kind}: {where}", cfg.model.prompt_style,
                       _runs_here(ok, why, f"model={path.stem}"))
    print_fitted(console, models)
    console.print("Any other model, without a YAML file: model=path model.path=DIR (a transformers folder), "
                  "model=gguf model.path=FILE.gguf, model=hub model.repo_id=ORG/NAME")

    precisions = Table(title="Precisions (precision=NAME)")
    for col in ("name", "backend", "what it is", "runs here?"):
        precisions.add_column(col)
    for path in sorted((CONF_DIR / "precision").glob("*.yaml")):
        cfg = compose([f"precision={path.stem}", "model=smollm2-135m"])
        ok, why = availability(cfg)
        precisions.add_row(path.stem, cfg.precision.backend, cfg.precision.description,
                           _runs_here(ok, why, f"precision={path.stem}"))
    print_fitted(console, precisions)

    evalsets = Table(title="Eval sets (evalset=NAME, or evalset.path=FOLDER)")
    for col in ("name", "path", "tasks (items)"):
        evalsets.add_column(col)
    for path in sorted((CONF_DIR / "evalset").glob("*.yaml")):
        cfg = compose([f"evalset={path.stem}"])
        try:
            tasks, _ = load_tasks(cfg)
            summary = ", ".join(f"{t.name} ({len(t.items)})" for t in tasks)
        except UserError as e:
            summary = f"cannot load: {e}"
        evalsets.add_row(path.stem, cfg.evalset.path, summary)
    print_fitted(console, evalsets)
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
