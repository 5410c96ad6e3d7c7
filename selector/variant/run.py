"""One variant, measured in this process: what the sweep's worker runs on its job.json, and what
`selector.evaluate` runs from names and overrides without the Hydra app (the CLI's sweep is a
layer over it: its preflight plans the variants, its jobs hand each to a worker, which calls
`run_here`).
"""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path
from typing import Any

from selector.config import SelectorConfig, to_dict
from selector.records import RunRecord
from selector.variant.jobfiles import Job, JobFiles

log = logging.getLogger("selector.variant.run")


def run_here(job: Job) -> RunRecord:
    """The variant's pipeline (prepare, load, evaluate, measure) in this process; its record, also
    written to the job folder (record.json) with its samples and stage."""
    from selector.compose import config_from_dict
    from selector.variant.pipeline import VariantRun

    cfg = config_from_dict(job.config)
    return VariantRun(cfg, job.key, job.evaluation_key, job.job_dir, job.is_reference, job.baseline,
                      job.reference_key).run()


def evaluate(overrides: list[str], job_dir: str | Path | None = None) -> RunRecord:
    """One variant from command-line overrides (one value each, no sweep): composed and checked as
    a sweep's preflight composes and checks a job, its keys computed, measured here by `run_here`.
    job_dir: its job folder (default: <output_dir>/variants/<time>/<model>/<precision>)."""
    from selector import compose
    from selector.errors import UserError
    from selector.variant.availability import check_precision
    from selector.variant.evaluation import load_tasks
    from selector.variant.keys import keys_of

    compose.check_group_choices(overrides)
    swept = [raw for raw, o in zip(overrides, compose._parse(overrides)) if o.is_sweep_override()]
    if swept:
        raise UserError(f"one variant takes one value per key; {', '.join(swept)} is a sweep (selector.run runs sweeps)")
    cfg = compose.compose(overrides)
    check_precision(cfg)  # a bad precision param stops here, naming its file
    _, ehash = load_tasks(cfg)
    keys = keys_of(cfg, ehash)
    folder = Path(job_dir) if job_dir is not None else _default_job_dir(cfg)
    job = Job(to_dict(cfg), keys.variant, keys.evaluation, folder.resolve(), baseline=_baseline(cfg, overrides))
    JobFiles(folder).write_job(job)  # `python -m selector.variant.worker <folder>/job.json` runs it again
    return run_here(job)


def _default_job_dir(cfg: SelectorConfig) -> Path:
    stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f")
    return Path(cfg.output_dir) / "variants" / stamp / cfg.model.name / cfg.precision.name


def _baseline(cfg: SelectorConfig, overrides: list[str]) -> dict[str, Any] | None:
    """The baseline precision's config, composed under the same overrides, when the variant wants a
    fidelity reference (as the sweep's preflight composes it); None when it cannot be composed."""
    from selector.compose import compose

    if not cfg.measure.fidelity or cfg.precision.name == cfg.baseline_precision:
        return None
    try:
        return to_dict(compose([*overrides, f"precision={cfg.baseline_precision}"]))["precision"]
    except Exception as e:  # a broken baseline file costs the reference, not the variant
        log.warning("fidelity: baseline precision %r cannot be composed (%s); no reference", cfg.baseline_precision, e)
        return None
