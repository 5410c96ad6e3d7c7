"""What every engine evaluates with: batched generation and log-likelihood scoring.

A prompt is either plain text (completion-style, for base models) or a list of chat messages
({"role": ..., "content": ...}); the engine renders messages with the model's chat template
(in-process) or sends them to a chat endpoint (servers). A measurement's synthetic prompt may
instead be given as token ids (exactly that many tokens), which every engine that has the
tokenizer, and vLLM, take as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Union

Messages = list[dict[str, str]]
Prompt = Union[str, Messages]
Progress = Callable[[int], None]  # called with the number of requests just finished


@dataclass(frozen=True)
class ItemRef:
    """The eval item a load-test request was made from: its task and item id."""

    task: str
    id: str


@dataclass
class GenerationRequest:
    prompt: Prompt
    max_new_tokens: int
    stop: list[str] = field(default_factory=list)
    # A measurement's fixed-length prompt: these ids are sent instead of rendering `prompt`
    # (which keeps a readable text of them, for an engine that takes text only).
    token_ids: list[int] | None = None
    # Generate exactly max_new_tokens (a latency or throughput run: every run does the same work).
    ignore_eos: bool = False
    # The prefix-cache salt (vLLM's `cache_salt`): a server that honours it shares cached prompt
    # blocks only between requests with the same salt. Measurements set it (measure.requests.salted)
    # so that no request is served from another's cached prompt unless the traffic declares the
    # sharing; sent only to an engine that says it takes salts (engine.prefix_cache=salt).
    cache_salt: str | None = None
    # The eval item this request was made from (a load test's request from the eval set, with its
    # task's prompt, answer length and stop sequences): its answer under load is scored against the
    # item's answer at rest (selector.measure.answers). None: a request file's row, a measurement.
    item: ItemRef | None = None


@dataclass
class Generation:
    text: str  # the completion, cut at the first stop sequence (which is not included)
    prompt_tokens: int
    output_tokens: int


@dataclass
class LoglikelihoodRequest:
    context: Prompt  # messages are rendered with the generation prompt appended
    continuation: str


@dataclass
class Loglikelihood:
    logprob: float  # sum of log-probabilities of the continuation's tokens
    tokens: int  # how many tokens the continuation took
    is_greedy: bool  # whether greedy decoding would have produced exactly this continuation


class Evaluator(Protocol):
    """What the evaluation calls (selector.tasks.evaluate): a running engine, or one rebatched."""

    name: str

    def generate(
        self, requests: list[GenerationRequest], progress: Progress | None = None
    ) -> list[Generation]: ...

    def loglikelihood(
        self, requests: list[LoglikelihoodRequest], progress: Progress | None = None
    ) -> list[Loglikelihood]: ...

    def render(self, prompt: Prompt) -> str:
        """The exact text the model sees for a prompt (chat template applied)."""
        ...


@dataclass
class ReplayRequest(GenerationRequest):
    """A request from the file: its recorded arrival, and its place in a conversation."""

    arrival_s: float | None = None
    session: str | None = None
    turn: int = 0  # 1-based within its session; 0 outside a session
    line: int = 0
    # Requests with the same `shares` may share cached prompt blocks (a trace's rows: their prompts
    # share exactly the blocks their hash_ids declare, and nothing else); None: none beyond its session.
    shares: str | None = None


def render_prompt(tokenizer: Any, prompt: Prompt) -> str:
    if isinstance(prompt, str):
        return prompt
    return tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)


def encode_prompt(tokenizer: Any, prompt: Prompt) -> list[int]:
    """The token ids a model sees for a prompt, chat template applied (a transformers tokenizer)."""
    # Chat templates already write the BOS token themselves; plain prompts get the tokenizer's.
    return tokenizer(render_prompt(tokenizer, prompt), add_special_tokens=isinstance(prompt, str))["input_ids"]
