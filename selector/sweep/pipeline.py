"""One variant, start to finish, inside its worker process, as one straight line:

    prepare -> start the engine -> evaluate -> fidelity -> measure -> memory -> stop

Each stage is a call on the variant's running engine (selector/engines: in-process transformers, or
a server the harness starts or attaches to), so every engine is evaluated and measured the same way
and nothing here asks which one runs. Preparing (converting, quantizing, the fidelity reference)
happens in a child process of its own, only when the cache lacks something (sweep/prepare.py).

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
from selector.sweep import evaluation
from selector.sweep.device import resolve_device
from selector.sweep.faults import maybe_inject
from selector.sweep.jobfiles import JobFiles, now, variant_of

log = logging.getLogger("selector.sweep.pipeline")


class VariantRun:
    def __init__(self, cfg: SelectorConfig, key: str, job_dir: Path, is_reference: bool = False,
                 baseline: dict[str, Any] | None = None, reference_key: str | None = None) -> None:
        self.cfg, self.key, self.is_reference = cfg, key, is_reference
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
        comparison = self.engine.in_process_comparison()  # engine.compare_in_process, as the engine reads it
        compared = self._evaluate_in_process(comparison, device, tasks) if comparison is not None else None
        with self.timed("load"):  # the engine loads the variant once: in this process, or in its server
            planned = int(planned_weight_bytes(cfg, device.split(":")[0])[0])
            running = self.engine.start(StartContext(cfg, device, self.files.dir, tasks, planned))
        with running, CpuShare() as share:  # another busy process on the machine slows every figure down
            try:
                self._scenario(running, tasks, device, compared)
            finally:  # what it held and what ran it, whatever happened (a server that died: until then)
                self._record_running(running, device)
        self.record.environment["machine_load"] = share.as_dict()

    def _scenario(self, running: Running, tasks: list[Any], device: str, compared: Any) -> None:
        from selector.measure.fidelity import measure_fidelity
        from selector.measure.perf import measure_perf

        cfg = self.cfg
        self._record_info(running)
        with self.timed("evaluate"):
            self.evaluate(running, tasks)
        if compared is not None:
            self._compare_engines(*compared)
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
        from selector.sweep.outcomes import stopped_shortfall

        search = self.cfg.search
        shortfall = stopped_shortfall(self.record)
        return (search.strategy == "adaptive" and not search.complete and search.sibling_margin is not None
                and shortfall is not None and shortfall.gap > search.sibling_margin)

    def _check_available(self, device: str) -> None:
        from selector.sweep.availability import availability

        ok, why = availability(self.cfg, device)
        if not ok:
            raise UnavailableError(why)

    def _prepare(self, device: str, tasks: list[Any]) -> None:
        """Convert, quantize and compute the fidelity reference in a process of its own, when any is missing."""
        from selector.precisions import get_backend
        from selector.sweep.prepare import prepare_in_child, reasons_to_prepare

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

    def _record_info(self, running: Running) -> None:
        """What runs the variant: its quantization, kernel, server, and what loading noted."""
        info = running.info()
        self.variant.params = self.variant.params or info.params
        self.record.kernel, self.record.serving = info.kernel, info.serving
        if info.quant is not None:
            self.record.quant = quant = info.quant
            quant.notes = list(dict.fromkeys([*quant.notes, *info.notes]))
            if self.quantized_here:  # the engine loaded it from the cache, where this run's preparation put it
                quant.cached = False
                quant.notes = [n for n in quant.notes if not n.startswith("reused cached artifact")]
            if quant.quantize_s and not quant.cached:  # a stage of this run; a cached artifact's took place before
                self.record.timings_s["quantize"] = quant.quantize_s
        if self.record.perf is not None and info.compiled is not None:
            self.record.perf.compiled, self.record.perf.compile_s = info.compiled, info.compile_s
            self.record.perf.compile_note = info.compile_note

    def _record_running(self, running: Running, device: str) -> None:
        try:
            self._record_info(running)  # again: a server's requests served, the fast path's compile time
            memory = running.memory()
        except Exception as e:  # never a reason to lose what was measured before
            log.warning("no memory figures for %s: %s: %s", self.variant.name, type(e).__name__, e)
            return
        memory.prepare = self.phases.get("prepare")
        runtime = memory.runtime_rss_bytes if self.engine.in_process else self.engine.planned_runtime_bytes(device)
        memory.planned_serving_bytes = self._planned_serving(running, device, runtime)
        self.record.memory = memory

    def _planned_serving(self, running: Running, device: str, runtime_bytes: int | None) -> int | None:
        """plan's estimate of the serving peak, at the shapes this variant ran, beside the measured one."""
        from selector.plan.estimate import serving_bytes, serving_shape

        if running.tokenizer is None:
            return None
        try:
            batch, context = serving_shape(self.cfg, self.tasks, running.encode)
            return serving_bytes(self.cfg, device, batch=batch, context=context, runtime_bytes=runtime_bytes,
                                 copies=self.engine.copies())
        except Exception as e:  # an estimate beside the figure: never a reason to lose the figure
            log.warning("no plan estimate of the serving peak: %s: %s", type(e).__name__, e)
            return None

    def _prepare_evaluation(self, tasks: list[Any]) -> None:
        """The item store of this variant's evaluation key, and the floors' tests when it may stop early."""
        from selector.search.sequential import floor_tests_for_policy
        from selector.sweep.keys import evaluation_key
        from selector.tasks import evalset_hash

        cfg = self.cfg
        key = evaluation_key(cfg, evalset_hash(tasks))
        self.record.config["evaluation_key"] = key
        self.store = evaluation.ItemStore(cfg.output_dir, key)
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

    # ---- a server's answers against the same checkpoint in-process (engine.compare_in_process) ----
    def _evaluate_in_process(self, engine: Any, device: str, tasks: list[Any]) -> tuple[dict[str, Any], list[SampleRecord]]:
        """Every item through the engine's in-process comparison (Engine.in_process_comparison), before
        the server starts, for the comparison with the served answers; its samples are kept beside the served ones."""
        from selector.tasks import evaluate_task

        cfg = self.cfg
        with self.timed("evaluate_in_process"), engine.start(
                StartContext(cfg, device, self.files.dir, tasks)) as local:
            results, samples = {}, []
            for task in tasks:
                results[task.name], got = evaluate_task(local, task, model_name=cfg.model.name,
                                                        model_prompt_style=cfg.model.prompt_style,
                                                        confidence=cfg.policy.confidence)
                samples += got
        (self.files.dir / "samples.in_process.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in samples))
        return results, samples

    def _compare_engines(self, results: dict[str, Any], samples: list[SampleRecord]) -> None:
        """record.agreement, and the in-process accuracy in record.tasks when the policy deploys on
        transformers (policy.deploy_engine=hf): the verdict uses the engine people will run."""
        from selector.sweep.agreement import accuracy_engine, compare

        record = self.record
        served = [SampleRecord.model_validate_json(line) for line in self.files.samples.read_text().splitlines() if line]
        record.agreement = compare(served, samples)
        decides = accuracy_engine(self.cfg.policy.deploy_engine, self.engine.in_process_comparison())
        record.config["accuracy_engine"] = decides
        if decides == "in_process":
            record.tasks = {name: results[name] for name in record.tasks if name in results}
        for task, a in record.agreement.items():
            log.info("%s %s: %d of %d answers differ between in-process and served (%s decides)",
                     self.variant.name, task, a.differ, a.n, decides)


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__
