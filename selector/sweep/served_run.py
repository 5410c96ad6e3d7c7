"""engine=openai, inside the variant's worker: the variant's own server is what gets evaluated and
load-tested (selector.sweep.pipeline.VariantRun runs the stages; this is the served branch of it).

What only the in-process copy can tell (fidelity, weight memory, and with
`engine.compare_in_process` its own answers) is taken first, then that copy is freed so the server
has the memory and the device to itself.
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from typing import Any

from selector.records import PerfResult, SampleRecord

log = logging.getLogger("selector.sweep.served_run")


def run_served(run: Any, resolved: Any, loaded: Any, tasks: Any, device: str) -> None:
    """run: the variant's VariantRun (its record, stages and evaluation)."""
    from selector.measure.memory import server_peak
    from selector.measure.traffic import run_server_load
    from selector.serving.session import release_model, served_engine, serving_checkpoint

    cfg = run.cfg
    checkpoint = serving_checkpoint(loaded, resolved, cfg.precision)
    if cfg.measure.fidelity:
        with run.timed("fidelity"):
            run.fidelity_pass(loaded, tasks)
    run.meter = None  # what serves it is the server: its processes' peak, read below
    run.record_memory(resolved, loaded, device)
    in_process = None
    if cfg.engine.compare_in_process:
        with run.timed("evaluate_in_process"):
            in_process = _evaluate_in_process(run, loaded, tasks)
    release_model(loaded)
    with ExitStack() as server:  # stopped on the way out, whatever happens inside
        with run.timed("load"):  # the server loads the checkpoint
            t0 = time.perf_counter()
            served = server.enter_context(served_engine(
                cfg.engine, model_path=checkpoint, dtype=cfg.precision.dtype, log_dir=run.files.dir,
                threads=cfg.threads))
            if cfg.engine.server == "vllm":
                from selector.serving.vllm import serving_info

                run.record.serving = serving_info(served.servers, time.perf_counter() - t0)
        try:
            with run.timed("evaluate"):
                run.evaluate(served.engine, tasks)
            if in_process is not None:
                _compare_engines(run, *in_process)
            if run.decision is not None:
                return
            with run.timed("measure"):
                run.record.perf = PerfResult(device=device)
                if cfg.measure.load.enabled:
                    run.record.perf.load = run_server_load(served, tasks, cfg, tokenizer=checkpoint)
                    if served.servers:  # its levels stay in the record; the variant fails
                        failed = [lv for lv in run.record.perf.load if lv.errors]
                        at = (f"the load test (first failed level: {_level_name(failed[0])}, "
                              f"{failed[0].errors} of {failed[0].requests} requests failed)"
                              if failed else "the load test")
                        served.check_alive(at)
                if cfg.measure.load.capacity:  # on the same running server, after the ladder
                    from selector.measure.traffic import run_server_capacity

                    found = run_server_capacity(served, tasks, cfg, tokenizer=checkpoint)
                    run.record.perf.capacity, run.record.perf.capacity_concurrency = (found.get("rate"),
                                                                                      found.get("concurrency"))
        finally:
            if run.record.memory is not None:
                run.record.memory.serving = server_peak(served.processes())
            if run.record.serving is not None:  # how the requests spread over the instances
                run.record.serving.requests = served.requests_served()


def _evaluate_in_process(run: Any, loaded: Any, tasks: Any) -> tuple[dict[str, Any], list[SampleRecord]]:
    """Every item through transformers in-process (engine=hf's defaults), for the comparison
    with the served answers; its samples are kept beside the served ones."""
    from selector.engines.hf import HFEngine
    from selector.tasks import evaluate_task

    cfg = run.cfg
    engine = HFEngine(loaded.model, loaded.tokenizer, 8, cfg.engine.max_batch_tokens)
    results, samples = {}, []
    for task in tasks:
        results[task.name], got = evaluate_task(engine, task, model_name=cfg.model.name,
                                                model_prompt_style=cfg.model.prompt_style,
                                                confidence=cfg.policy.confidence)
        samples += got
    (run.files.dir / "samples.in_process.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in samples))
    return results, samples


def _compare_engines(run: Any, results: dict[str, Any], samples: list[SampleRecord]) -> None:
    """record.agreement, and the in-process accuracy in record.tasks when the policy deploys on
    transformers (policy.deploy_engine=hf): the verdict uses the engine people will run."""
    from selector.sweep.agreement import accuracy_engine, compare

    record = run.record
    served = [SampleRecord.model_validate_json(line) for line in run.files.samples.read_text().splitlines() if line]
    record.agreement = compare(served, samples)
    decides = accuracy_engine(run.cfg.policy.deploy_engine)
    record.config["accuracy_engine"] = decides
    if decides == "in_process":
        record.tasks = {name: results[name] for name in record.tasks if name in results}
    for task, a in record.agreement.items():
        log.info("%s %s: %d of %d answers differ between in-process and served (%s decides)",
                 run.variant.name, task, a.differ, a.n, decides)


def _level_name(level: Any) -> str:
    return f"c={level.concurrency}" if level.concurrency is not None else f"{level.rate_rps:g} req/s"
