"""engine=scripted: an engine that answers without a model, for tests of what is not about the
model (the adaptive search, the policy flow, faults, the report), so they run in seconds.

It knows the eval set it is started with: for each item it answers the item's own target (a
perfect answer) with the probability the config gives that variant on that task, and a wrong one
otherwise (an empty generation; the gold choice ranked below another). Which items it gets right is
a fixed function of the variant, the task and the item, so a sweep is the same every time. Timed
requests behave like a server with `slots` requests computing at once: the first token after
`ttft_ms`, then one every `ms_per_token`, queueing when every slot is busy (a known service time);
they answer as the evaluation does, except that `load_flip` can move an item's answer when another
request computes beside it (answers under load).
Nothing is converted or quantized, and its memory is plan's estimate of the weights.

Fidelity runs as for an in-process model, on made-up distributions: a prompt's tokens are its words
hashed into a vocabulary of `vocab` ids, and the next-token distribution after a prefix is a fixed
draw per (seed, model, prefix); every precision but the sweep's baseline adds its own fixed noise
of scale `logit_noise` to the logits, so the baseline writes the reference and its siblings differ
from it by a KL that grows with that scale.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from selector.config import EngineConfig
from selector.generation import Generation, GenerationRequest, Loglikelihood, LoglikelihoodRequest, Prompt
from selector.engines.spec import Batching, Channel, Engine, EngineInfo, Range, Running, StartContext, TopLogprobs
from selector.trace import RequestTrace

if TYPE_CHECKING:
    from selector.config import SelectorConfig
    from selector.origin import Origin
    from selector.records import MemoryResult


@dataclass
class ScriptedEngineConfig(EngineConfig):
    kind: str = "scripted"
    # The chance of a right answer per task, per variant: keys are "model/precision", a precision or
    # a model name (the most specific that names the variant wins), values {task: probability}.
    accuracy: dict[str, dict[str, float]] = field(default_factory=dict)
    default_accuracy: float = 1.0  # for a task no entry names
    # Answers that move under load: per variant (keys as accuracy's), the chance that a timed request
    # answering while another computes gets the other answer than at rest (right <-> wrong), a fixed
    # draw per (variant, task, item); alone, it answers as at rest.
    load_flip: dict[str, float] = field(default_factory=dict)
    ttft_ms: float = 5.0
    ms_per_token: float = 1.0
    slots: int = 4  # requests computing at once; the rest wait
    batch_size: int = 8
    seed: int = 0
    vocab: int = 256  # token ids a prompt's words hash into (fidelity's probes)
    logit_noise: float = 0.5  # the scale of a non-baseline precision's difference from the baseline's logits


class ScriptedEngine(Engine[ScriptedEngineConfig]):
    kind = "scripted"
    label = "scripted (no model)"
    Config = ScriptedEngineConfig
    needs_checkpoint = False
    ranges = (Range("default_accuracy", lambda v: 0 <= v <= 1, "a probability in [0, 1]"),
              Range("ttft_ms", lambda v: v >= 0, "0 or more"), Range("ms_per_token", lambda v: v >= 0, "0 or more"),
              Range("slots", lambda v: v >= 1, "at least 1"), Range("batch_size", lambda v: v >= 1, "at least 1"),
              Range("vocab", lambda v: v >= 2, "at least 2"), Range("logit_noise", lambda v: v >= 0, "0 or more"))

    def weights_held(self) -> str:
        # No model is loaded or converted: a variant's weights are its precision's checkpoint as saved
        # (its nominal size, smaller for fewer bits), what its memory reports and the search orders by.
        return "as-saved"

    def check(self, cfg: SelectorConfig, origin: Origin) -> None:
        for name, tasks in self.config.accuracy.items():
            for task, p in tasks.items():
                if not 0 <= float(p) <= 1:
                    raise origin.error(f"engine.accuracy.{name}.{task}", f"must be a probability in [0, 1], got {p!r}")
        for name, p in self.config.load_flip.items():
            if not 0 <= float(p) <= 1:
                raise origin.error(f"engine.load_flip.{name}", f"must be a probability in [0, 1], got {p!r}")

    def start(self, ctx: StartContext) -> ScriptedRunning:
        return ScriptedRunning(self.config, ctx)


def _key(prompt: Prompt) -> str:
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True)


def _draw(*parts: object) -> int:
    """A fixed 64-bit number for these parts."""
    return int.from_bytes(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:8], "big")


def _normal(size: int, *parts: object) -> Any:
    """`size` standard normal numbers, fixed for these parts."""
    import numpy as np

    return np.random.default_rng(_draw(*parts)).standard_normal(size)


class ScriptedRunning(Running):
    name = "scripted"
    token_ids = False

    def __init__(self, config: ScriptedEngineConfig, ctx: StartContext) -> None:
        from selector.tasks.prompts import build_prompt, continuation, resolve_style

        cfg = ctx.cfg
        self.config, self.cfg = config, cfg
        self.answers: dict[str, tuple[str, str, str]] = {}  # prompt -> (task, item id, the right answer)
        for task in ctx.tasks:
            style = resolve_style(task, cfg.model.name, cfg.model.prompt_style)
            for item in task.items:
                right = item.targets[style] if task.type == "generate" else continuation(task, item.targets[style], style)
                self.answers[_key(build_prompt(task, item, style))] = (task.name, item.id, right)
        self.slots: asyncio.Semaphore | None = None
        self.planned_weight_bytes = ctx.planned_weight_bytes

    # ---- answers --------------------------------------------------------------------------------
    def probability(self, task: str) -> float:
        names = (f"{self.cfg.model.name}/{self.cfg.precision.name}", self.cfg.precision.name, self.cfg.model.name)
        for name in names:
            if task in self.config.accuracy.get(name, {}):
                return float(self.config.accuracy[name][task])
        return self.config.default_accuracy

    def right(self, task: str, item: str) -> bool:
        """Whether this variant answers this item right: a fixed draw per (variant, task, item)."""
        draw = _draw(self.config.seed, self.cfg.model.name, self.cfg.precision.name, task, item) / 2**64
        return draw < self.probability(task)

    def answer(self, prompt: Prompt, crowded: bool = False) -> str:
        """The item's target when this variant gets it right, else nothing; crowded (another request
        computing beside it): the other one, for an item that load_flip's draw moves."""
        task, item, target = self.answers.get(_key(prompt), ("", "", ""))
        right = bool(task) and self.right(task, item)
        if task and crowded:
            names = (f"{self.cfg.model.name}/{self.cfg.precision.name}", self.cfg.precision.name, self.cfg.model.name)
            flip = next((float(self.config.load_flip[n]) for n in names if n in self.config.load_flip), 0.0)
            draw = _draw(self.config.seed, "load", self.cfg.model.name, self.cfg.precision.name, task, item) / 2**64
            right ^= draw < flip
        return target if right else ""

    def generate(self, requests: list[GenerationRequest], progress: Any = None) -> list[Generation]:
        out = []
        for r in requests:
            text = self.answer(r.prompt)
            out.append(Generation(text=text, prompt_tokens=len(self.render(r.prompt).split()),
                                  output_tokens=len(text.split())))
        if progress:
            progress(len(requests))
        return out

    def loglikelihood(self, requests: list[LoglikelihoodRequest], progress: Any = None) -> list[Loglikelihood]:
        by_context: dict[str, list[int]] = {}
        for i, r in enumerate(requests):
            by_context.setdefault(_key(r.context), []).append(i)
        scores: list[Loglikelihood | None] = [None] * len(requests)
        for key, members in by_context.items():
            task, item, gold = self.answers.get(key, ("", "", ""))
            best = gold if task and self.right(task, item) else next(
                (requests[i].continuation for i in members if requests[i].continuation != gold), gold)
            for i in members:
                top = requests[i].continuation == best
                scores[i] = Loglikelihood(logprob=-1.0 if top else -5.0, tokens=1, is_greedy=top)
        if progress:
            progress(len(requests))
        return scores  # type: ignore[return-value]

    def render(self, prompt: Prompt) -> str:
        from selector.engines.served.client import render_messages

        return prompt if isinstance(prompt, str) else render_messages(prompt)

    def rebatched(self, batch_size: int) -> ScriptedRunning:
        return self

    # ---- timed requests ------------------------------------------------------------------------
    @asynccontextmanager
    async def session(self, batching: Batching) -> AsyncIterator[Channel]:
        from selector.resources.utilization import UtilizationMonitor, own_process

        slots = asyncio.Semaphore(self.config.slots)
        computing = [0]

        async def send(request: GenerationRequest) -> RequestTrace:
            trace = RequestTrace(sent=time.perf_counter())
            async with slots:
                computing[0] += 1
                trace.picked = trace.compute_start = time.perf_counter()
                trace.text = self.answer(request.prompt, crowded=computing[0] > 1)
                tokens = request.max_new_tokens
                try:
                    await asyncio.sleep(self.config.ttft_ms / 1e3)
                    trace.token_times.append(time.perf_counter())
                    for _ in range(tokens - 1):
                        await asyncio.sleep(self.config.ms_per_token / 1e3)
                        trace.token_times.append(time.perf_counter())
                finally:
                    computing[0] -= 1
            trace.end, trace.output_tokens = time.perf_counter(), tokens
            trace.prompt_tokens = len(self.render(request.prompt).split())
            return trace

        yield Channel(send, lambda: UtilizationMonitor(own_process, time.thread_time, [], subtract_harness=True))

    # ---- fidelity ---------------------------------------------------------------------------------
    def encode(self, prompt: Prompt) -> list[int]:
        return [_draw(word) % self.config.vocab for word in self.render(prompt).split()]

    def token_logprobs(self, prompts: list[list[int]], positions: int) -> Iterator[TopLogprobs]:
        """The whole vocabulary's log-probabilities after each of a probe's last `positions` prefixes."""
        import numpy as np
        import torch

        config, model, precision = self.config, self.cfg.model.name, self.cfg.precision.name
        noise = 0.0 if precision == self.cfg.baseline_precision else config.logit_noise
        for ids in prompts:
            rows = []
            for end in range(max(1, len(ids) - positions + 1), len(ids) + 1):
                prefix = ",".join(map(str, ids[:end]))
                logits = 2.0 * _normal(config.vocab, config.seed, model, prefix)
                if noise:
                    logits += noise * _normal(config.vocab, config.seed, model, precision, prefix)
                rows.append(logits)
            yield TopLogprobs(logp=torch.log_softmax(torch.tensor(np.array(rows), dtype=torch.float32), dim=-1))

    # ---- memory and what ran ---------------------------------------------------------------------
    def memory(self) -> MemoryResult:
        from selector.records import MemoryResult

        if self.planned_weight_bytes is None:  # the variant's run always passes plan's estimate
            raise ValueError("the scripted engine reports plan's weight estimate: StartContext.planned_weight_bytes is unset")
        return MemoryResult(weight_bytes=self.planned_weight_bytes, weights_source="plan")

    def info(self) -> EngineInfo:
        return EngineInfo(notes=["scripted engine: answers from the eval set's targets, no model"])

    def stop(self, interrupted: bool = False) -> None:
        pass
