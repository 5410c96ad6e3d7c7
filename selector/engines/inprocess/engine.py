"""engine=hf: transformers in the variant's own worker process.

`start` loads the variant's checkpoint from the cache (quantizing it there first only if the
preparation process did not) between two readings of the process's memory, so the load has a peak
of its own; from then on the process serves it, and its resident high-water mark (or CUDA's
reserved peak) is the serving peak, except while fidelity's probe passes run (selector's own
measurement, with prompts of up to 1024 tokens and the whole vocabulary's distributions).

Evaluation batches through TransformersEvaluator (engines/inprocess/evaluator.py); every timed figure
goes through `send`, a dynamic batching scheduler in front of the model (engines/inprocess/batching.py),
as a server would take the requests: at concurrency 1 a batch of one, at a throughput batch size that
many at once, under load the batching the measure config sets.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from selector.config import EngineConfig, SelectorConfig
from selector.generation import GenerationRequest
from selector.engines.spec import Batching, Channel, Engine, EngineInfo, Knob, Range, Running, StartContext, TopLogprobs
from selector.trace import RequestTrace

if TYPE_CHECKING:
    from selector.engines.inprocess.evaluator import TransformersEvaluator
    from selector.generation import Generation, Loglikelihood, LoglikelihoodRequest, Progress
    from selector.origin import Origin
    from selector.records import MemoryResult, PeakMemory

log = logging.getLogger("selector.engines.inprocess.engine")


@dataclass
class HfEngineConfig(EngineConfig):
    kind: str = "hf"
    batch_size: int = 8  # evaluation rows per batch
    max_batch_tokens: int = 16384  # cap on padded tokens per batch, so long prompts get smaller batches
    # Static KV cache + torch.compile'd decode step (engines/inprocess/fast.py). auto: on for CUDA, off for
    # CPU; on: also on CPU, and a failing compile fails the variant. A string: quote it in YAML
    # ('on'), where a bare on/off reads as true/false (also accepted).
    compile: str = "auto"


class InProcessEngine(Engine[HfEngineConfig]):
    kind = "hf"
    label = "hf"
    Config = HfEngineConfig
    in_process = True
    # policy.deploy_engine names it `hf` (its deploy_name), never these.
    deploy_spellings = ("transformers", "huggingface", "hugging-face", "in-process", "inprocess", "in_process", "local")
    # The dynamic batcher in front of the model under load: its knobs live with the load test.
    knobs = (Knob("measure.load.max_batch_size", "max_batch_size", "at least 1", lambda v: v >= 1),
             Knob("measure.load.max_queue_delay_ms", "max_queue_delay_ms", "0 or more", lambda v: v >= 0))
    ranges = (Range("batch_size", lambda v: v >= 1, "at least 1"),
              Range("max_batch_tokens", lambda v: v >= 1, "at least 1"))

    def load_advice(self, layer: str, knobs: dict[str, Any], concurrency: int | None) -> str:
        """The dynamic batcher's knobs (measure.load.max_batch_size, max_queue_delay_ms)."""
        conc, size, delay = concurrency, knobs.get("max_batch_size"), knobs.get("max_queue_delay_ms")
        if layer == "queue":
            if conc is not None and size is not None and size < conc:
                return f"raise max_batch_size (now {size}, below the {conc} requests in flight) or add an instance"
            if conc is not None and size is not None:
                return (f"add an instance, since max_batch_size={size} already holds the {conc} requests in flight "
                        "and a running batch takes no newcomers until it ends (continuous batching would)")
            return "add an instance or raise max_batch_size" + (f" (now {size})" if size is not None else "")
        now = f" (now {delay:g} ms)" if delay is not None else ""
        few = (f" ({conc} in flight, fewer than max_batch_size={size})"
               if conc is not None and size is not None and conc < size else "")
        return (f"lower max_queue_delay_ms{now}, since batches do not fill at this load{few} and requests wait out "
                "the delay")

    def check(self, cfg: SelectorConfig, origin: Origin) -> None:
        from selector.engines.inprocess.fast import compile_setting
        from selector.errors import ConfigError

        try:
            compile_setting(self.config.compile)  # a typo stops the sweep now, not each variant
        except ConfigError as e:
            raise origin.error("engine.compile", e.problem) from None

    def start(self, ctx: StartContext) -> InProcessRunning:
        return InProcessRunning.load(self.config, ctx)


class InProcessRunning(Running):
    name = "hf"
    token_ids = True

    def __init__(self, config: HfEngineConfig, loaded: Any, resolved: Any = None, device: str = "cpu") -> None:
        """The engine around a model already loaded (LoadedModel); `load` loads one as a sweep does."""
        from selector.engines.inprocess.evaluator import TransformersEvaluator
        from selector.resources.memory import PhaseMeter

        self.config, self.loaded, self.resolved, self.device = config, loaded, resolved, device
        self.model, self.tokenizer = loaded.model, loaded.tokenizer
        self.hf = TransformersEvaluator(self.model, self.tokenizer, config.batch_size, config.max_batch_tokens,
                           compile=config.compile)
        # Prompts tokenized ahead of a timed run, by the prompt object's id (a salted copy of a
        # request shares its prompt), each kept with its prompt so that id is never reused.
        self._encoded: dict[int, tuple[Any, list[int]]] = {}
        self.meter = PhaseMeter(device)
        self.meter.start()  # from here on: serving it
        self.held: PeakMemory | None = None  # the serving peak before a pass that does not count (fidelity)
        self.load_peak: PeakMemory | None = None
        self.runtime_rss: int | None = None

    @classmethod
    def load(cls, config: HfEngineConfig, ctx: StartContext) -> InProcessRunning:
        """Load the variant from the cache (quantizing it first only if the preparation process did
        not), between two readings of this process's memory: the load is a phase of its own."""
        from selector.resources.memory import PhaseMeter, current_rss_bytes
        from selector.precisions import load_variant
        from selector.precisions.calibration import calibration_texts

        cfg = ctx.cfg
        _import_runtime(cfg.precision.backend)  # the runtime figure holds the libraries, the load only the model
        meter = PhaseMeter(ctx.device)
        meter.start()
        runtime = current_rss_bytes()
        resolved, loaded = load_variant(
            cfg.model, cfg.precision, cfg.cache_dir, ctx.device, calibration=cfg.calibration,
            calibration_texts=lambda: calibration_texts(cfg.calibration, ctx.tasks))
        load_peak = meter.read()
        running = cls(config, loaded, resolved, ctx.device)
        running.load_peak, running.runtime_rss = load_peak, runtime
        return running

    # ---- evaluation ---------------------------------------------------------------------------
    def generate(self, requests: list[GenerationRequest], progress: Progress | None = None) -> list[Generation]:
        return self.hf.generate(requests, progress)

    def loglikelihood(self, requests: list[LoglikelihoodRequest],
                      progress: Progress | None = None) -> list[Loglikelihood]:
        return self.hf.loglikelihood(requests, progress)

    def render(self, prompt: Any) -> str:
        return self.hf.render(prompt)

    def rebatched(self, batch_size: int) -> TransformersEvaluator:
        from selector.engines.inprocess.evaluator import TransformersEvaluator

        return TransformersEvaluator(self.model, self.tokenizer, batch_size, self.config.max_batch_tokens)

    # ---- timed requests -------------------------------------------------------------------------
    @asynccontextmanager
    async def session(self, batching: Batching) -> AsyncIterator[Channel]:
        """A dynamic batching scheduler in front of the model; `send` submits to it and waits."""
        from selector.engines.conversations import Conversations
        from selector.resources.utilization import UtilizationMonitor, nvml_indices, own_process
        from selector.engines.inprocess.batching import BatchingScheduler

        device = next(self.model.parameters()).device
        gpus = nvml_indices([device.index or 0]) if device.type == "cuda" else []
        loop = asyncio.get_running_loop()
        scheduler = BatchingScheduler(self.model, self.tokenizer, batching.max_batch_size,
                                      batching.max_queue_delay_ms, eos_ids=self.hf.eos_ids, pad_id=self.hf.pad_id,
                                      generate=self.hf.fast.generate)
        with scheduler:

            async def send(request: GenerationRequest) -> RequestTrace:
                done: asyncio.Future[RequestTrace] = loop.create_future()

                def deliver(trace: RequestTrace) -> None:  # on the scheduler thread
                    def settle() -> None:  # on the event loop's
                        if not done.done():
                            done.set_result(trace)

                    loop.call_soon_threadsafe(settle)

                ids = request.token_ids if request.token_ids is not None else self._prepared(request.prompt)
                ids = ids if ids is not None else self.hf.encode(request.prompt)  # a turn: the conversation so far
                scheduler.submit(ids, request.max_new_tokens, request.stop, deliver, ignore_eos=request.ignore_eos)
                return await done

            # The harness is this event loop's thread; the model runs on the scheduler's.
            def monitor() -> UtilizationMonitor:
                return UtilizationMonitor(own_process, time.thread_time, gpus, subtract_harness=True)

            yield Channel(Conversations().wrap(send), monitor, after_level=scheduler.drain)

    def prepare(self, requests: list[Any]) -> None:
        """Tokenized now, not while the clock runs (a session's later turns are, when sent)."""
        self._encoded.update({id(r.prompt): (r.prompt, self.hf.encode(r.prompt)) for r in requests
                              if id(r.prompt) not in self._encoded})

    def _prepared(self, prompt: Any) -> list[int] | None:
        kept = self._encoded.get(id(prompt))
        return kept[1] if kept is not None and kept[0] is prompt else None

    def warm(self, ids: list[list[int]], new_tokens: int) -> None:
        """Compile the fast path for this shape outside any timed run (engine.compile)."""
        import torch

        self.hf.fast.warm(torch.tensor(ids, device=next(self.model.parameters()).device), new_tokens, self.hf.pad_id)

    # ---- fidelity -----------------------------------------------------------------------------
    def token_logprobs(self, prompts: list[list[int]], positions: int) -> Iterator[TopLogprobs]:
        """The whole vocabulary's log-probabilities, one probe at a time, unpadded. Selector's own
        measurement: the serving peak so far is kept and the meter restarts after it."""
        from selector.engines.inprocess.logprobs import probe_logprobs
        from selector.resources.memory import higher

        self.held = higher(self.held, self.meter.read())
        try:
            for logp in probe_logprobs(self.model, prompts, positions):
                yield TopLogprobs(logp)
        finally:
            self.meter.start()

    # ---- memory and what ran ---------------------------------------------------------------------
    def memory(self) -> MemoryResult:
        from selector.resources.memory import higher, measure_memory
        from selector.precisions.base import dir_bytes

        loaded, resolved = self.loaded, self.resolved
        artifact = loaded.quant.artifact_bytes if loaded.quant and loaded.quant.artifact_bytes else None
        on_disk = artifact or dir_bytes(loaded.artifact_dir) or (resolved.artifact_bytes() if resolved else None)
        return measure_memory(self.model, self.device, on_disk, serving=higher(self.meter.read(), self.held),
                              load=self.load_peak, runtime_rss_bytes=self.runtime_rss)

    def info(self) -> EngineInfo:
        from selector.precisions.kernel_info import unpacked_note

        loaded = self.loaded
        notes = list(loaded.notes)
        if loaded.quant is not None and loaded.kernel is not None and loaded.kernel.unpacked:
            notes.append(unpacked_note(loaded.kernel))  # plain Linear where a quantized model was loaded
        fast = self.hf.fast
        return EngineInfo(quant=loaded.quant, kernel=loaded.kernel, notes=notes,
                          params=int(self.resolved.manifest.get("parameters", 0)) if self.resolved else 0,
                          compiled=fast.active, compile_s=fast.compile_s, compile_note=fast.note)

    def stop(self, interrupted: bool = False) -> None:
        """Drop the model so its memory goes back before anything else in this process runs."""
        import gc

        self.model = self.hf = None  # type: ignore[assignment]
        if getattr(self, "loaded", None) is not None:
            self.loaded.model = None
        gc.collect()


def _import_runtime(backend_name: str) -> None:
    """Import what loading the model imports (transformers' model classes, the precision's library):
    hundreds of MB of code and tables that any process serving this model holds before its weights."""
    import importlib

    from selector.precisions import get_backend

    for name in ("transformers.models.auto.modeling_auto", get_backend(backend_name).library):
        if name:
            importlib.import_module(name)
