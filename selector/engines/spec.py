"""What an engine is: one class per kind, registered in selector/engines/__init__.py.

An engine owns its typed config (`Config`, a dataclass subclassing selector.config.EngineConfig, the
type the engine is generic over: conf/engine/<name>.yaml is validated against it) and answers,
before anything loads, whether it can run a variant here, what of its config can change a score,
which serving knobs it has and what it is called. `start` returns a `Running`
engine: everything a variant is evaluated and measured through (selector/variant/pipeline.py), the
same calls whatever runs the model, so a served variant gets every figure an in-process one gets:

    generate / loglikelihood      evaluation (batched; a server takes them concurrently)
    session(batching)             the load driver's streamed, timed `send` (latency at c=1,
                                  throughput, load ladder, capacity), with the engine's own
                                  utilisation and queue/compute split
    token_logprobs(prompts, k)    fidelity through what serves the variant
    memory()                      what serving it held, as the engine holds it
    info()                        version, kernels, packed or not, quantization
    stop()

Heavy libraries (torch, transformers, vLLM) are imported only inside `start` and what it returns,
so every config validates without them.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from selector.config import EngineConfig
from selector.generation import (Evaluator, Generation, GenerationRequest, Loglikelihood, LoglikelihoodRequest,
                                 Progress, Prompt, encode_prompt)
from selector.trace import RequestTrace

if TYPE_CHECKING:
    from selector.config import SelectorConfig
    from selector.origin import Origin
    from selector.records import KernelInfo, MemoryResult, Percentiles, QuantInfo, ServingInfo
    from selector.resources.utilization import UtilizationMonitor

Send = Callable[[GenerationRequest], Awaitable[RequestTrace]]


class ServerDiedError(RuntimeError):
    """What serves the variant (a server) exited while it was being measured: Running.check_alive
    raises it, its message ending with the server log's last lines."""


@dataclass(frozen=True)
class Knob:
    """A serving setting a sweep may vary without changing any score (selector.engines.knobs):
    each value is its own variant, sharing the scored items of its model x precision."""

    key: str  # the dotted config key, e.g. engine.vllm.max_num_seqs
    short: str  # the name a setting shows: "max_num_seqs=8"
    rule: str  # what it must be, for the error when it is not
    ok: Callable[[Any], bool] = lambda v: True


@dataclass(frozen=True)
class Range:
    """A number an engine config's type cannot restrict, checked before anything loads."""

    key: str  # dotted, below `engine.`
    ok: Callable[[Any], bool]
    rule: str


@dataclass
class Batching:
    """How the requests of one measurement are batched by an engine that batches them itself
    (the in-process engine's dynamic batcher). A server batches as it was started to."""

    max_batch_size: int = 1
    max_queue_delay_ms: float = 0.0


@dataclass
class StartContext:
    """What an engine starts a variant from: its config, where it runs and writes its logs, the
    tasks (whose texts may calibrate a quantization that is not cached yet) and plan's estimate."""

    cfg: SelectorConfig
    device: str  # cpu | cuda | cuda:N
    job_dir: Path  # the variant's folder: server logs go here
    tasks: list[Any] = field(default_factory=list)
    # plan's estimate of the variant's weights (selector.plan), for an engine that cannot read them
    # (a server someone else runs, the scripted engine); the variant's run computes it.
    planned_weight_bytes: int | None = None


@dataclass
class Channel:
    """How one running engine takes timed requests (Running.session gives it): `send`, and how a
    level on it is measured: whose CPU (and GPU) the monitor reads, what to do between levels (the
    in-process scheduler drains leftovers), and where a server's queue/compute split comes from."""

    send: Send
    monitor: Callable[[], UtilizationMonitor]
    after_level: Callable[[], Any] | None = None
    scrape: Callable[[], Awaitable[Any]] | None = None  # a server's metrics, read before and after a level
    split: Callable[[Any, Any], dict[str, Percentiles]] | None = None  # (before, after) -> queue_ms, compute_ms
    describe_split: Callable[[Any], tuple[str, str]] | None = None  # after -> (source, note)
    counters: Callable[[], Awaitable[dict[str, float] | None]] | None = None  # a server's counters, read like scrape
    prefix_cache_hit_rate: Callable[[Any, Any], float | None] | None = None  # (before, after) -> share served cached


@dataclass
class EngineInfo:
    """What ran the variant, for the record: the precision's quantization (from its artifact), the
    kernel the in-process engine runs, the server's own account (version, kernels, instances)."""

    quant: QuantInfo | None = None
    kernel: KernelInfo | None = None
    serving: ServingInfo | None = None
    params: int = 0  # the model's parameter count when the engine knows it
    notes: list[str] = field(default_factory=list)
    # The in-process fast path (engine.compile): on or not, its compile seconds, why it is off.
    compiled: bool | None = None
    compile_s: float | None = None
    compile_note: str = ""


@dataclass
class TopLogprobs:
    """One probe's next-token distributions at its last positions, as the engine computed them:
    per position, the `k` most likely token ids (most likely first) and their log-probabilities,
    or (ids None) the whole vocabulary's, in token-id order (in-process)."""

    logp: Any  # float32 [positions, k or vocabulary]
    ids: Any = None  # int64 [positions, k]; None: logp covers every token id

class Running(Evaluator, abc.ABC):
    """A started engine, serving one variant. A context manager: leaving it stops the engine.

    The type every consumer takes a running engine as (the variant's run, the measurements). What
    every kind must implement is abstract here: a kind that leaves one out cannot be instantiated
    (TypeError at `start`, and mypy's error where the class is built); the rest have defaults."""

    name: str = ""  # the engine's display name (hf, vllm, ...)
    tokenizer: Any = None  # the checkpoint's tokenizer when there is one here (synthetic prompts, probes)
    token_ids: bool = True  # accepts prompts as token ids (GenerationRequest.token_ids)

    # ---- evaluation (the Evaluator protocol) ---------------------------------------------------
    @abc.abstractmethod
    def generate(self, requests: list[GenerationRequest], progress: Progress | None = None) -> list[Generation]:
        """Greedy generations, one per request, in order."""

    @abc.abstractmethod
    def loglikelihood(self, requests: list[LoglikelihoodRequest],
                      progress: Progress | None = None) -> list[Loglikelihood]:
        """Each continuation's log-probability given its context, in order."""

    @abc.abstractmethod
    def render(self, prompt: Prompt) -> str:
        """The exact text the model sees for a prompt (chat template applied)."""

    def encode(self, prompt: Any) -> list[int]:
        """The token ids the model sees for a prompt (chat template applied), as the in-process
        engine encodes them."""
        if self.tokenizer is None:
            raise ValueError(f"engine {self.name} has no tokenizer here to encode prompts with")
        return encode_prompt(self.tokenizer, prompt)

    @abc.abstractmethod
    def session(self, batching: Batching) -> AbstractAsyncContextManager[Channel]:
        """An async context (inside an event loop) giving the load driver's Channel: `send` and how
        to measure a level (utilisation, the queue/compute split)."""

    def prepare(self, requests: list[Any]) -> None:
        """Requests about to be timed: whatever can be done to them before the clock starts
        (in-process: tokenizing them)."""

    def warm(self, ids: list[list[int]], new_tokens: int) -> None:
        """Compile this batch shape now, if the engine compiles per shape, so no timed run does."""

    @abc.abstractmethod
    def rebatched(self, batch_size: int) -> Evaluator:
        """The same engine evaluating `batch_size` requests at a time (the noise floor)."""

    @abc.abstractmethod
    def token_logprobs(self, prompts: list[list[int]], positions: int) -> Iterator[TopLogprobs]:
        """Per prompt (token ids), the next-token distributions at its last `positions` positions:
        the whole vocabulary's, or the top `max_logprobs` the engine gives (a server)."""

    max_logprobs: int | None = None  # the most log-probabilities per position it returns (None: all)

    @abc.abstractmethod
    def memory(self) -> MemoryResult:
        """What serving the variant held, as this engine holds it (docs/memory.md)."""

    @abc.abstractmethod
    def info(self) -> EngineInfo:
        """What ran the variant, for the record."""

    def check_alive(self, during: str, grace_s: float = 0.0) -> None:
        """Raise when what serves the variant has died (a server process), waiting up to grace_s for
        an exit under way; nothing in-process."""

    @abc.abstractmethod
    def stop(self, interrupted: bool = False) -> None:
        """Stop serving (a server: its processes; in-process: the model's memory)."""

    def __enter__(self) -> Running:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self.stop(interrupted=exc_type is not None and not issubclass(exc_type, Exception))


C = TypeVar("C", bound=EngineConfig)


def server_advice(layer: str) -> str:
    """The load diagnosis's advice for a server whose knobs the harness does not know."""
    if layer == "queue":
        return ("add an instance (a replica), or let the server run more requests at once "
                "(vLLM --max-num-seqs, TGI --max-batch-size)")
    return "lower the server's own batching delay, if it has one, since batches do not fill at this load"


class Engine(abc.ABC, Generic[C]):
    """The base of every engine kind, generic over its config (`Engine[HfEngineConfig]`). Subclasses
    set the class attributes and implement `start`."""

    kind: ClassVar[str] = ""  # the registry name, as `kind:` in conf/engine/*.yaml
    label: ClassVar[str] = ""  # what the report calls it
    what: ClassVar[str] = ""  # what this kind of engine is, for error messages
    # its typed config (a dataclass, an EngineConfig: the C it is generic over; a ClassVar cannot name C)
    Config: ClassVar[type[EngineConfig]] = EngineConfig
    in_process: ClassVar[bool] = False  # runs the model in the variant's worker process
    needs_checkpoint: ClassVar[bool] = True  # the variant's checkpoint is made (converted, quantized) first
    knobs: ClassVar[tuple[Knob, ...]] = ()
    ranges: ClassVar[tuple[Range, ...]] = ()
    # Config fields that change how requests are scheduled or how the engine is found, never an
    # answer: left out of the evaluation key, so settings share scored items.
    not_scored: ClassVar[tuple[str, ...]] = ()
    # Other spellings people give policy.deploy_engine for what this kind's deploy_name() says:
    # refused before anything runs, with a did-you-mean naming the one spelling (check_deploy_engine).
    deploy_spellings: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: C) -> None:
        self.config: C = config

    # ---- before anything loads -------------------------------------------------------------
    def display_name(self) -> str:
        return self.label or self.kind

    def copies(self) -> int:
        """Copies of the weights serving one variant (servers per variant)."""
        return 1

    def context_limit(self) -> int | None:
        """The longest sequence this engine's settings allow, when they set one below the model's."""
        return None

    def planned_runtime_bytes(self, device: str) -> int | None:
        """What `plan` counts for the engine itself before any weights (None: the process's own,
        measured before the model loads, as the in-process engine does)."""
        return None

    def weights_held(self) -> str:
        """How this engine holds a variant's weights, for plan's estimate (selector.precisions.weights
        .HOLDINGS): "in-process" (as the precision's own loader holds them), "as-saved" (the
        checkpoint as saved, packed where quantized, as a server's kernels run it) or "unknown" (a
        server's own way: counted as in-process, said so)."""
        return "in-process"

    def load_advice(self, layer: str, knobs: dict[str, Any], concurrency: int | None) -> str:
        """The load diagnosis's advice (selector.measure.diagnosis) when `layer` holds a level's time:
        "queue" (waiting behind running requests) or "batch_wait" (waiting for a batch to fill), in
        this engine's own knobs. knobs: their values as the record set them (Knob.short -> value);
        concurrency: the level's requests in flight (None: a rate). This default: server_advice."""
        return server_advice(layer)

    def in_process_comparison(self) -> Engine[Any] | None:
        """The in-process engine a served variant's answers are compared with on the same checkpoint
        (engine.compare_in_process: record.agreement), or None: no comparison."""
        return None

    def deploy_name(self) -> str | None:
        """The name policy.deploy_engine would give what runs the variant (None: not known here)."""
        return self.kind

    def is_deploy_engine(self, deploy_engine: str | None) -> bool | None:
        """Whether policy.deploy_engine names what runs the variant: the one test of it, for the
        accuracy the verdict uses and the latency warning. None: no deploy_engine is given, or this
        engine cannot tell what runs the variant (an attached server)."""
        name = self.deploy_name()
        if not deploy_engine or name is None:
            return None
        return name == deploy_engine

    def check(self, cfg: SelectorConfig, origin: Origin) -> None:
        """Settings that cannot work stop the sweep now (a ConfigError naming the field)."""

    def unavailable(self, cfg: SelectorConfig) -> str | None:
        """Why this engine cannot run this variant here (recorded as skipped), or None."""
        return None

    def prefix_cache(self) -> str:
        """How the measurements' requests are kept out of each other's cached prompts: "salt" (the
        engine honours GenerationRequest.cache_salt, which the load test sets per request or per
        declared group), "none" (it keeps no prefix cache across requests: nothing to isolate), or
        "unknown" (it may, and nothing isolates them: the sweep warns before anything loads). An
        in-process engine runs every batch of the load test from an empty KV cache: none."""
        return "none"

    def key_material(self) -> dict[str, Any]:
        """What of this config can change a score (the evaluation key)."""
        data = dataclasses.asdict(self.config)
        return _without(data, self.not_scored)

    def measure_material(self) -> dict[str, Any]:
        """What changes only the measurements (in the variant key beside the evaluation key)."""
        data = dataclasses.asdict(self.config)
        return _only(data, self.not_scored)

    # ---- a variant ------------------------------------------------------------------------
    @abc.abstractmethod
    def start(self, ctx: StartContext) -> Running:
        """Start serving the variant (load it, or start its server): every kind implements it."""


def _without(data: dict[str, Any], dotted: tuple[str, ...]) -> dict[str, Any]:
    out = dict(data)
    for key in dotted:
        head, _, rest = key.partition(".")
        if rest and isinstance(out.get(head), dict):
            out[head] = _without(out[head], (rest,))
        else:
            out.pop(head, None)
    return out


def _only(data: dict[str, Any], dotted: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in dotted:
        head, _, rest = key.partition(".")
        if rest and isinstance(data.get(head), dict):
            out.setdefault(head, {}).update(_only(data[head], (rest,)))
        elif head in data:
            out[head] = data[head]
    return out
