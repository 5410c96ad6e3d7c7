"""One variant, start to finish, inside its worker process, as one straight line:

    prepare -> start the engine -> evaluate -> fidelity -> measure -> memory -> stop

Each stage is a call on the variant's running engine (selector/engines: in-process transformers, or
a server the harness starts or attaches to), so every engine is evaluated and measured the same way
and nothing here asks which one runs. Preparing (converting, quantizing, the fidelity reference)
happens in a child process of its own, only when the cache lacks something (variant/prepare.py).
What the running engine says of itself (kernel, server, memory) goes into the record through
variant/recording.py; a server's answers beside in-process ones through variant/in_process.py.

Everything it learns is written to the job folder as it goes: the current stage, each scored
sample, and at the end the record, so a crash loses nothing already measured and the parent can
say in which stage it died.
"""

from __future__ import annotations

import logging
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from selector.config import SelectorConfig, to_dict
from selector.engines import engine_for
from selector.generation import Evaluator
from selector.engines.spec import Running, StartContext
from selector.errors import UnavailableError
from selector.measure.contention import CpuShare
from selector.plan.estimate import planned_weight_bytes
from selector.records import ErrorInfo, PeakMemory, PerfResult, RunRecord, SampleRecord
from selector.variant import evaluation
from selector.variant.device import resolve_device
from selector.variant.faults import maybe_inject
from selector.variant.in_process import answer_in_process, record_agreement
from selector.variant.jobfiles import JobFiles, now, variant_of
from selector.variant.recording import record_info, record_running

log = logging.getLogger("selector.variant.pipeline")


class VariantRun:
    def __init__(self, cfg: SelectorConfig, key: str, evaluation_key: str, job_dir: Path, is_reference: bool = False,
                 baseline: dict[str, Any] | None = None, reference_key: str | None = None) -> None:
        self.cfg, self.key, self.is_reference = cfg, key, is_reference
        self.evaluation_key = evaluation_key  # computed once, by whoever planned the variant (keys.keys_of)
        self.baseline = baseline  # the baseline precision's config, as the sweep's preflight composed it
        self.reference_key = reference_key  # the reference variant's evaluation key (non_inferiority)
        self.files = JobFiles(job_dir)
        self.variant = variant_of(cfg)
        # nothing prepared or loaded until _prepare says otherwise (stopped on stored items; no checkpoint of ours)
        self.record = RunRecord(key=key, variant=self.variant, status="failed", config=to_dict(cfg), started_at=now(),
                                preparation="none")
        self.stage = "preflight"
        self.engine = engine_for(cfg.engine)
        self.decision = None  # set when adaptive search finds a floor out of reach
        self.phases: dict[str, PeakMemory] = {}  # the preparation process's peak, when it ran
        self.quantized_here = False  # the preparation process quantized the artifact the engine then loads
        self.tasks: list[Any] = []
        self.at_rest: list[SampleRecord] = []  # the evaluation's answers, which the load test's are compared with

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        self.stage = stage
        self.files.set_stage(stage)
        log.info("stage %s: %s", stage, self.variant.name)
        maybe_inject(self.variant.name, stage)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.record.timings_s[stage] = round(self.record.timings_s.get(stage, 0.0) + time.perf_counter() - t0, 3)

    def run(self) -> RunRecord:
        try:
            self._run()
            self.record.status = "stopped" if self.decision is not None else "completed"
            if self.decision is not None:
                self.record.reason = f"stopped early: {self.decision.reason}"
        except UnavailableError as e:
            self.record.status, self.record.reason = "skipped", str(e)
            log.warning("skipped %s: %s", self.variant.name, e)
        except BaseException as e:  # record everything, even KeyboardInterrupt, then re-raise those
            self.record.status = "failed"
            self.record.reason = f"{type(e).__name__} in {self.stage}: {_one_line(e)}"
            self.record.error = ErrorInfo(
                type=type(e).__name__, message=str(e)[:4000], stage=self.stage, log_tail=traceback.format_exc()[-6000:]
            )
            log.error("variant %s failed in %s: %s", self.variant.name, self.stage, e)
            if not isinstance(e, Exception):
                self._finish()
                raise
        self._finish()
        return self.record

    def _finish(self) -> None:
        self.record.finished_at = now()
        self.record.save(self.files.record)

    def _run(self) -> None:
        import torch

        from selector.measure.environment import environment
        from selector.tasks import load_evalset

        cfg = self.cfg
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        torch.manual_seed(cfg.seed)
        device = resolve_device(cfg.device)
        self.record.environment = environment(device)
        self._check_available(device)
        tasks = self.tasks = load_evalset(cfg.evalset.path, cfg.evalset.tasks, cfg.evalset.limit)
        if any(t.metric == "code_tests" for t in tasks):
            from selector.tasks.sandbox import isolation

            # generated code runs here, and how well it is contained depends on this machine's kernel
            self.record.environment["code_sandbox"] = list(isolation())
        self._prepare_evaluation(tasks)
        order = evaluation.evaluation_orders(tasks, evaluation.order_seed_of(cfg))
        self.decision = evaluation.decide_from_store(self.stopper, order, {t.name: self.store.load(t.name) for t in tasks},
                                                     self.reference, cfg.search.round_size)
        if self.decision is not None:  # the items already scored settle it: no model needs to load
            self.evaluate(None, tasks)
            return
        if self.engine.needs_checkpoint:
            self._prepare(device, tasks)
        compared = None
        comparison = self.engine.in_process_comparison()  # engine.compare_in_process, as the engine reads it
        if comparison is not None:
            with self.timed("evaluate_in_process"):
                compared = answer_in_process(comparison, cfg, device, self.files.dir, tasks)
        with self.timed("load"):  # the engine loads the variant once: in this process, or in its server
            planned = int(planned_weight_bytes(cfg, device.split(":")[0])[0])
            running = self.engine.start(StartContext(cfg, device, self.files.dir, tasks, planned))
        with running, CpuShare() as share:  # another busy process on the machine slows every figure down
            try:
                self._scenario(running, tasks, device, compared)
            finally:  # what it held and what ran it, whatever happened (a server that died: until then)
                record_running(self.record, running, self.engine, cfg, device, self.tasks, self.phases.get("prepare"),
                               self.quantized_here)
        self.record.environment["machine_load"] = share.as_dict()

    def _scenario(self, running: Running, tasks: list[Any], device: str, compared: Any) -> None:
        from selector.measure.fidelity import measure_fidelity
        from selector.measure.perf import measure_perf

        cfg = self.cfg
        record_info(self.record, running, self.quantized_here)
        with self.timed("evaluate"):
            self.evaluate(running, tasks)
        if compared is not None:
            results, samples = compared
            record_agreement(self.record, self.files.samples, results, samples, cfg.policy.deploy_engine,
                             self.engine.in_process_comparison())
        if self.decision is not None:  # stopped early: what it weighs, and nothing else to measure
            if cfg.measure.fidelity and cfg.precision.name == cfg.baseline_precision and not self._spares_siblings():
                with self.timed("fidelity"):  # but a baseline still leaves its siblings their reference
                    measure_fidelity(running, tasks, cfg)
            return
        if self.is_reference and cfg.measure.noise_floor.repeats > 0:
            with self.timed("noise_floor"):
                spread = evaluation.noise_floor(running, tasks, cfg, {n: r.value for n, r in self.record.tasks.items()})
                self.record.config["noise_floor"] = spread
                log.info("noise floor of %s over %d re-evaluations: %s", self.variant.name,
                         cfg.measure.noise_floor.repeats, spread)
        if cfg.measure.fidelity:
            with self.timed("fidelity"):
                self.record.fidelity = measure_fidelity(running, tasks, cfg)
        with self.timed("measure"):
            self.record.perf = PerfResult(device=device)
            measure_perf(running, tasks, cfg, self.record.perf, self.at_rest)

    def _spares_siblings(self) -> bool:
        """A stopped baseline too far below a floor for any quantized copy to pass it: the search
        will not run its siblings (search.sibling_margin), so none needs its fidelity reference."""
        search = self.cfg.search
        shortfall = evaluation.stopped_shortfall(self.record)
        return (search.strategy == "adaptive" and not search.complete and search.sibling_margin is not None
                and shortfall is not None and shortfall.gap > search.sibling_margin)

    def _check_available(self, device: str) -> None:
        from selector.variant.availability import availability

        ok, why = availability(self.cfg, device)
        if not ok:
            raise UnavailableError(why)

    def _prepare(self, device: str, tasks: list[Any]) -> None:
        """Convert, quantize and compute the fidelity reference in a process of its own, when any is missing."""
        from selector.precisions import get_backend
        from selector.variant.prepare import prepare_in_child, reasons_to_prepare

        reasons = reasons_to_prepare(self.cfg, get_backend(self.cfg.precision.backend), tasks)
        if not reasons:
            self.record.preparation = "cache"
            return
        with self.timed("prepare"):
            log.info("preparing %s in a separate process: %s", self.variant.name, "; ".join(reasons))
            prepared = prepare_in_child(self.cfg, self.baseline, self.files.dir)
        self.phases["prepare"] = prepared.peak
        self.record.config["prepared"] = prepared.did
        self.record.preparation = "built" if prepared.made else "cache"  # the child may only have found it all
        self.quantized_here = "artifact" in prepared.made

    def _prepare_evaluation(self, tasks: list[Any]) -> None:
        """The item store of this variant's evaluation key, and the floors' tests when it may stop early."""
        from selector.search.sequential import floor_tests_for_policy

        cfg = self.cfg
        self.record.config["evaluation_key"] = self.evaluation_key
        self.store = evaluation.ItemStore(cfg.output_dir, self.evaluation_key)
        self.stopper, self.reference = None, None
        if cfg.search.strategy != "adaptive" or not cfg.search.stop_early:
            return
        specs = evaluation.task_specs(tasks)
        reference_tasks = () if self.is_reference else None  # the reference passes non-inferiority to itself
        self.stopper = floor_tests_for_policy(cfg.policy, specs, cfg.search.alpha, cfg.search.round_size,
                                              non_inferiority_tasks=reference_tasks)
        if cfg.policy.rule == "non_inferiority" and not self.is_reference:
            self.reference = self._reference_scores(tasks)

    def _reference_scores(self, tasks: list[Any]) -> dict[str, list[float]] | None:
        """The reference variant's scores in evaluation order, for the non-inferiority tests."""
        if not self.reference_key:
            raise UnavailableError("adaptive search under the non_inferiority rule needs the reference's scores, "
                                   "and this sweep names no reference")
        store = evaluation.ItemStore(self.cfg.output_dir, self.reference_key)
        seen = {t.name: store.load(t.name) for t in tasks}
        return evaluation.prefix_scores(evaluation.evaluation_orders(tasks, evaluation.order_seed_of(self.cfg)), seen)

    def evaluate(self, engine: Evaluator | None, tasks: list[Any]) -> None:
        """Score the items (reusing stored ones), in rounds when the search may stop early."""
        from tqdm.auto import tqdm

        from selector.tasks.evaluate import summarize

        cfg = self.cfg
        total = sum(len(t.items) for t in tasks)
        with tqdm(total=total, desc=f"evaluate {self.variant.name}", unit="item", disable=engine is None) as bar:

            def score(task: Any, ids: list[str]) -> list[SampleRecord]:
                return self._score_items(engine, task, ids, bar)

            round_size = cfg.search.round_size if self.stopper is not None else None
            outcome = evaluation.run(tasks, self.store, score, seed=evaluation.order_seed_of(cfg), round_size=round_size,
                                     stopper=self.stopper, reference=self.reference, strategy=cfg.search.strategy)
        by_name = {t.name: t for t in tasks}
        self.at_rest = [r for samples in outcome.samples.values() for r in samples.values()]
        with self.files.samples.open("w") as sink:
            for name, samples in outcome.samples.items():
                sink.write("".join(r.model_dump_json() + "\n" for r in samples.values()))
                if samples:
                    result = summarize(by_name[name], {i: r.score for i, r in samples.items()}, cfg.policy.confidence,
                                       cfg.policy.ci_method)
                    self.record.tasks[name] = result
                    log.info("%s %s: %.3f [%.3f, %.3f] n=%d", self.variant.name, name, result.value, result.ci_low,
                             result.ci_high, result.n)
        self.files.write_partial_tasks(self.record.tasks)
        self.record.search = outcome.info
        self.decision = outcome.decision
        if outcome.decision is not None:
            log.info("%s stopped after %d of %d items: %s", self.variant.name, outcome.info.items_evaluated,
                     outcome.info.items_total, outcome.decision.reason)

    def _score_items(self, engine: Evaluator | None, task: Any, ids: list[str], bar: Any) -> list[SampleRecord]:
        import dataclasses

        from selector.tasks import evaluate_task

        if engine is None:
            raise AssertionError("items left to score but no model was loaded")
        wanted = set(ids)
        subset = dataclasses.replace(task, items=[item for item in task.items if item.id in wanted])
        _, samples = evaluate_task(engine, subset, model_name=self.cfg.model.name,
                                   model_prompt_style=self.cfg.model.prompt_style,
                                   confidence=self.cfg.policy.confidence, progress=bar.update)
        return samples

def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__
