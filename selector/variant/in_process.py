"""A served engine's answers beside transformers' in this process, on the same checkpoint
(engine.compare_in_process): the in-process pass before the server starts, and what the record
keeps of the two (selector.variant.agreement counts the answers that differ)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from selector.config import SelectorConfig
from selector.engines.spec import Engine, StartContext
from selector.records import RunRecord, SampleRecord
from selector.variant.agreement import accuracy_engine, engine_agreement

log = logging.getLogger("selector.variant.in_process")


def answer_in_process(engine: Engine[Any], cfg: SelectorConfig, device: str, job_dir: Path,
                      tasks: list[Any]) -> tuple[dict[str, Any], list[SampleRecord]]:
    """Every item through the served engine's in-process comparison (Engine.in_process_comparison),
    before the server starts, for the comparison with the served answers; its samples are kept
    beside the served ones."""
    from selector.tasks import evaluate_task

    with engine.start(StartContext(cfg, device, job_dir, tasks)) as local:
        results, samples = {}, []
        for task in tasks:
            results[task.name], got = evaluate_task(local, task, model_name=cfg.model.name,
                                                    model_prompt_style=cfg.model.prompt_style,
                                                    confidence=cfg.policy.confidence)
            samples += got
    (job_dir / "samples.in_process.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in samples))
    return results, samples


def record_agreement(record: RunRecord, served_file: Path, results: dict[str, Any], samples: list[SampleRecord],
                     deploy_engine: str | None, in_process: Engine[Any] | None) -> None:
    """record.agreement, and the in-process accuracy in record.tasks when the policy deploys on
    transformers (policy.deploy_engine=hf): the verdict uses the engine people will run."""
    served = [SampleRecord.model_validate_json(line) for line in served_file.read_text().splitlines() if line]
    record.agreement = engine_agreement(served, samples)
    decides = accuracy_engine(deploy_engine, in_process)
    record.config["accuracy_engine"] = decides
    if decides == "in_process":
        record.tasks = {name: results[name] for name in record.tasks if name in results}
    for task, a in record.agreement.items():
        log.info("%s %s: %d of %d answers differ between in-process and served (%s decides)",
                 record.name, task, a.differ, a.n, decides)
