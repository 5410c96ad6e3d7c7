"""One variant, start to finish, inside its worker process: materialize -> evaluate -> measure ->
RunRecord (see worker.py). Everything it learns is written to
the job folder as it goes: the current stage, each scored sample, and at the end the record, so a
crash loses nothing already measured and the parent can say in which stage it died.
"""

from __future__ import annotations

import logging
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from selector.config import SelectorConfig, to_dict
from selector.errors import UnavailableError
from selector.measure.contention import CpuShare
from selector.sweep import evaluation
from selector.sweep.device import resolve_device
from selector.sweep.engine_runs import ENGINE_RUNS
from selector.sweep.faults import maybe_inject
from selector.sweep.jobfiles import JobFiles, now, variant_of
from selector.measure.memory import PhaseMeter, current_rss_bytes, higher
from selector.records import ErrorInfo, PeakMemory, RunRecord, SampleRecord

log = logging.getLogger("selector.sweep.pipeline")


class VariantRun:
    def __init__(self, cfg: SelectorConfig, key: str, job_dir: Path, is_reference: bool = False,
                 baseline: dict[str, Any] | None = None, reference_key: str | None = None) -> None:
        self.cfg, self.key, self.is_reference = cfg, key, is_reference
        self.baseline = baseline  # the baseline precision's config, as the sweep's preflight composed it
        self.reference_key = reference_key  # the reference variant's evaluation key (non_inferiority)
        self.files = JobFiles(job_dir)
        self.variant = variant_of(cfg)
        self.record = RunRecord(key=key, variant=self.variant, status="failed", config=to_dict(cfg), started_at=now())
        self.stage = "preflight"
        self.decision = None  # set when adaptive search finds a floor out of reach
        self.meter: PhaseMeter | None = None  # the current phase's peak memory (measure/memory.py)
        self.phases: dict[str, PeakMemory] = {}  # prepare, load: peaks of the phases already over
        self.serving_so_far: PeakMemory | None = None  # the serving peak before a pass that does not count
        self.runtime_rss: int | None = None
        self.tasks: list = []  # type: ignore[type-arg]

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
        backend = self._check_available(device)
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
        self._prepare(backend, device, tasks)
        _import_runtime(backend)  # so the runtime figure holds the libraries, and the load phase only the model
        self.meter = PhaseMeter(device)
        self.meter.start()
        self.runtime_rss = current_rss_bytes()
        with self.timed("load"):
            resolved, loaded = self._materialize(device, tasks)
        self.phases["load"] = self.meter.read()
        self.meter.start()  # from here on: serving it
        with CpuShare() as share:  # another busy process on the machine slows every figure down
            ENGINE_RUNS.get(cfg.engine.kind)(self, resolved, loaded, tasks, device)
        self.record.environment["machine_load"] = share.as_dict()

    def _check_available(self, device: str):  # type: ignore[no-untyped-def]
        from selector.precisions import get_backend
        from selector.sweep.availability import availability

        ok, why = availability(self.cfg, device)
        if not ok:
            raise UnavailableError(why)
        return get_backend(self.cfg.precision.backend)

    def _prepare(self, backend, device: str, tasks) -> None:  # type: ignore[no-untyped-def]
        """Convert, quantize and compute the fidelity reference in a process of its own, when any is missing."""
        from selector.sweep.prepare import prepare_in_child, reasons_to_prepare

        reasons = reasons_to_prepare(self.cfg, backend, tasks)
        if not reasons:
            return
        with self.timed("prepare"):
            log.info("preparing %s in a separate process: %s", self.variant.name, "; ".join(reasons))
            prepared = prepare_in_child(self.cfg, self.baseline, self.files.dir)
        self.phases["prepare"] = prepared.peak
        self.record.config["prepared"] = prepared.did

    def _materialize(self, device: str, tasks):  # type: ignore[no-untyped-def]
        """Resolve the model source, then load it at the precision (quantizing or reusing the cache)."""
        from selector.precisions import load_variant
        from selector.precisions.calibration import calibration_texts

        cfg = self.cfg
        resolved, loaded = load_variant(cfg.model, cfg.precision, cfg.cache_dir, device, calibration=cfg.calibration,
                                        calibration_texts=lambda: calibration_texts(cfg.calibration, tasks))
        self.variant.params = self.variant.params or int(resolved.manifest.get("parameters", 0))
        self.record.kernel = loaded.kernel
        if loaded.quant is not None:
            self.record.quant = loaded.quant
            self.record.quant.notes = list(dict.fromkeys([*loaded.quant.notes, *loaded.notes]))
            if loaded.quant.quantize_s:
                self.record.timings_s["quantize"] = loaded.quant.quantize_s
        return resolved, loaded

    def record_memory(self, resolved, loaded, device: str) -> None:  # type: ignore[no-untyped-def]
        from selector.measure.memory import measure_memory
        from selector.precisions.base import dir_bytes
        from selector.precisions.kernel_info import unpacked_note

        artifact = loaded.quant.artifact_bytes if loaded.quant and loaded.quant.artifact_bytes else None
        on_disk = artifact or dir_bytes(loaded.artifact_dir) or resolved.artifact_bytes()
        serving = higher(self.meter.read(), self.serving_so_far) if self.meter is not None else None
        self.record.memory = measure_memory(loaded.model, device, on_disk, serving=serving,
                                            load=self.phases.get("load"), prepare=self.phases.get("prepare"),
                                            runtime_rss_bytes=self.runtime_rss)
        self.record.memory.planned_serving_bytes = self._planned_serving(loaded, device)
        quant, kernel = self.record.quant, self.record.kernel
        if quant and kernel and kernel.unpacked:  # read off the modules: plain Linear where a quantized model was loaded
            quant.notes.append(unpacked_note(kernel))

    def _planned_serving(self, loaded, device: str) -> int | None:  # type: ignore[no-untyped-def]
        """plan's estimate of the serving peak, at the shapes this variant ran, beside the measured one."""
        from selector.measure.fidelity import PromptEncoder
        from selector.plan.estimate import serving_bytes, serving_shape

        if self.runtime_rss is None or loaded.tokenizer is None:
            return None
        try:
            batch, context = serving_shape(self.cfg, self.tasks, PromptEncoder(loaded.tokenizer).encode)
            return serving_bytes(self.cfg, device, batch=batch, context=context, runtime_bytes=self.runtime_rss)
        except Exception as e:  # an estimate beside the figure: never a reason to lose the figure
            log.warning("no plan estimate of the serving peak: %s: %s", type(e).__name__, e)
            return None

    def _prepare_evaluation(self, tasks) -> None:  # type: ignore[no-untyped-def]
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

    def _reference_scores(self, tasks) -> dict[str, list[float]] | None:  # type: ignore[no-untyped-def]
        """The reference variant's scores in evaluation order, for the non-inferiority tests."""
        if not self.reference_key:
            raise UnavailableError("adaptive search under the non_inferiority rule needs the reference's scores, "
                                   "and this sweep names no reference")
        store = evaluation.ItemStore(self.cfg.output_dir, self.reference_key)
        seen = {t.name: store.load(t.name) for t in tasks}
        return evaluation.prefix_scores(evaluation.evaluation_orders(tasks, evaluation.order_seed_of(self.cfg)), seen)

    def evaluate(self, engine, tasks) -> None:  # type: ignore[no-untyped-def]
        """Score the items (reusing stored ones), in rounds when the search may stop early."""
        from tqdm.auto import tqdm

        from selector.tasks.evaluate import summarize

        cfg = self.cfg
        total = sum(len(t.items) for t in tasks)
        with tqdm(total=total, desc=f"evaluate {self.variant.name}", unit="item", disable=engine is None) as bar:

            def score(task, ids: list[str]) -> list[SampleRecord]:  # type: ignore[no-untyped-def]
                return self._score_items(engine, task, ids, bar)

            round_size = cfg.search.round_size if self.stopper is not None else None
            outcome = evaluation.run(tasks, self.store, score, seed=evaluation.order_seed_of(cfg), round_size=round_size,
                                     stopper=self.stopper, reference=self.reference, strategy=cfg.search.strategy)
        by_name = {t.name: t for t in tasks}
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

    def _score_items(self, engine, task, ids: list[str], bar) -> list[SampleRecord]:  # type: ignore[no-untyped-def]
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

    def fidelity_pass(self, loaded, tasks) -> None:  # type: ignore[no-untyped-def]
        """Fidelity's probe passes (prompts of up to 1024 tokens, the full vocabulary's distribution)
        are selector's measurement, not serving: the peak so far is kept and the meter restarts after."""
        from selector.measure.fidelity import measure_fidelity

        held = self.meter.read() if self.meter is not None else None
        try:
            self.record.fidelity = measure_fidelity(loaded, tasks, self.cfg)
        finally:
            if self.meter is not None:
                self.serving_so_far = higher(self.serving_so_far, held)
                self.meter.start()


def _import_runtime(backend) -> None:  # type: ignore[no-untyped-def]
    """Import what loading the model imports (transformers' model classes, the precision's library):
    hundreds of MB of code and tables that any process serving this model holds before its weights."""
    import importlib

    for name in ("transformers.models.auto.modeling_auto", backend.library):
        if name:
            importlib.import_module(name)


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__
