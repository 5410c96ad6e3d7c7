"""A client of any OpenAI-compatible server (vLLM, TGI, SGLang, llama.cpp, `transformers serve`), through
which the served engines (openai, command, vllm) evaluate and send their load.

Plain prompts go to /v1/completions, chat messages to /v1/chat/completions (the server applies the
model's chat template). Decoding is greedy (temperature 0); stop sequences are sent to the server and
applied again here, since servers differ on whether they include the stop text. Requests run
concurrently (engine.batch_size at a time) so a batching server batches them.

Log-likelihoods need the prompt's token log-probabilities: /v1/completions with `echo` and
`logprobs`, which vLLM supports; a server that returns none gets a clear error instead of a guess.

`stream` is the load generator's probe: one streamed request whose clock readings (first token,
each chunk, end) are taken here, in the client, as a user would see them.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import httpx

from selector.generation import (
    Generation,
    GenerationRequest,
    Loglikelihood,
    LoglikelihoodRequest,
    Messages,
    Progress,
    Prompt,
)
from selector.errors import ConfigError
from selector.trace import RequestTrace

T = TypeVar("T")
R = TypeVar("R")


class ServerError(RuntimeError):
    """The server answered with an error status or an error inside the stream."""


def render_messages(messages: Messages) -> str:
    """A readable rendering of chat messages (what a person needs to see, not the model's template)."""
    lines = [f"[{m.get('role', '?')}]\n{m.get('content', '')}" for m in messages]
    return "\n\n".join(lines) + "\n\n[assistant]\n"


def cut_at_stop(text: str, stops: Sequence[str]) -> str:
    cut = min((text.find(s) for s in stops if s in text), default=-1)
    return text[:cut] if cut >= 0 else text


class OpenAIClient:
    name = "openai"

    def __init__(
        self,
        base_url: str | Sequence[str],
        model: str | None = None,
        *,
        api_key: str | None = None,
        chat: bool = True,
        concurrency: int = 8,
        timeout_s: float = 300.0,
        params: dict[str, Any] | None = None,
        chat_renderer: Callable[[Messages], str] | None = None,
        extensions: bool = False,
        cache_salt: bool = False,
    ) -> None:
        # Several base URLs: instances of one model, requests spread over them round-robin.
        self.base_urls = [u.rstrip("/") for u in ([base_url] if isinstance(base_url, str) else base_url)]
        self.base_url = self.base_urls[0]
        self._next_base = itertools.cycle(self.base_urls)
        self.model, self.chat, self.concurrency = model, chat, max(1, concurrency)
        self.timeout_s, self.params = timeout_s, dict(params or {})
        self.chat_renderer = chat_renderer  # the model's own chat template, for log-likelihoods
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}  # never logged
        # vLLM's extensions to the API: prompts as token ids, ignore_eos, prompt log-probabilities
        # by token id. Another server gets the text and standard fields only.
        self.extensions = extensions
        # The server takes vLLM's `cache_salt` (its prefix cache shared only between requests with the
        # same salt): a request's salt is sent. Another server gets none (it may refuse the field).
        self.cache_salt = cache_salt

    def with_concurrency(self, concurrency: int) -> OpenAIClient:
        """The same client sending `concurrency` evaluation requests at once."""
        other = copy.copy(self)
        other.concurrency = max(1, concurrency)
        other._next_base = itertools.cycle(self.base_urls)
        return other

    @property
    def root_url(self) -> str:
        """The server's root (for /health and /metrics): base_url without its trailing /v1."""
        return self.root_urls[0]

    @property
    def root_urls(self) -> list[str]:
        """Each instance's root."""
        return [u[: -len("/v1")] if u.endswith("/v1") else u for u in self.base_urls]

    def client(self, max_connections: int | None = None) -> httpx.AsyncClient:
        loopback = httpx.URL(self.base_url).host in ("127.0.0.1", "localhost", "::1")
        return httpx.AsyncClient(
            headers=self._headers,
            timeout=httpx.Timeout(self.timeout_s, connect=30.0),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            trust_env=not loopback,  # a proxy from the environment must not sit between us and a local server
        )

    # ---- prompts -------------------------------------------------------------------------
    def render(self, prompt: Prompt) -> str:
        return prompt if isinstance(prompt, str) else render_messages(prompt)

    def _body(self, request: GenerationRequest, stream: bool) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {"max_tokens": request.max_new_tokens, "temperature": 0.0, "stream": stream}
        if self.model:
            body["model"] = self.model
        if request.stop:
            body["stop"] = list(request.stop)
        if stream:
            body["stream_options"] = {"include_usage": True}
        if request.ignore_eos and self.extensions:
            body["ignore_eos"] = True
        if request.cache_salt and self.cache_salt:
            body["cache_salt"] = request.cache_salt
        if request.token_ids is not None and self.extensions:
            body["prompt"] = list(request.token_ids)
            path = "/completions"
        elif isinstance(request.prompt, str):
            body["prompt"] = request.prompt
            path = "/completions"
        elif self.chat:
            body["messages"] = request.prompt
            path = "/chat/completions"
        else:
            raise ConfigError("engine", field="chat",
                              problem="this task sends chat messages but engine.chat is false; set engine.chat=true "
                                      "or model.prompt_style=plain")
        body.update(self.params)
        return next(self._next_base) + path, body

    # ---- generation ----------------------------------------------------------------------
    def generate(self, requests: list[GenerationRequest], progress: Progress | None = None) -> list[Generation]:
        return self._run_all(requests, self._generate_one, progress)

    async def _generate_one(self, client: httpx.AsyncClient, request: GenerationRequest) -> Generation:
        url, body = self._body(request, stream=False)
        data = await self._post(client, url, body)
        choice = (data.get("choices") or [{}])[0]
        text = choice.get("text")
        if text is None:
            text = (choice.get("message") or {}).get("content") or ""
        usage = data.get("usage") or {}
        return Generation(text=cut_at_stop(text, request.stop), prompt_tokens=int(usage.get("prompt_tokens") or 0),
                          output_tokens=int(usage.get("completion_tokens") or 0))

    async def stream(self, client: httpx.AsyncClient, request: GenerationRequest) -> RequestTrace:
        """One streamed request, timed in the client. Failures are recorded, not raised."""
        url, body = self._body(request, stream=True)
        trace = RequestTrace(sent=time.perf_counter())
        parts: list[str] = []
        usage_tokens = None
        try:
            async with client.stream("POST", url, json=body) as resp:
                if resp.status_code >= 400:
                    detail = (await resp.aread()).decode(errors="replace")[:300]
                    raise ServerError(f"HTTP {resp.status_code}: {detail}")
                async for line in resp.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    chunk = json.loads(data)
                    if chunk.get("error"):
                        raise ServerError(f"error in stream: {str(chunk['error'])[:300]}")
                    if carries_token(chunk):
                        trace.token_times.append(time.perf_counter())
                        parts.append(_chunk_text(chunk))
                    usage = chunk.get("usage") or {}
                    if usage.get("completion_tokens") is not None:
                        usage_tokens = int(usage["completion_tokens"])
                        trace.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        except Exception as e:  # connection refused or reset, timeout, HTTP error, bad chunk
            trace.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
        trace.end = time.perf_counter()
        trace.text = cut_at_stop("".join(parts), request.stop)
        trace.output_tokens = usage_tokens if usage_tokens is not None else len(trace.token_times)
        return trace

    # ---- log-likelihood ------------------------------------------------------------------
    def loglikelihood(
        self, requests: list[LoglikelihoodRequest], progress: Progress | None = None
    ) -> list[Loglikelihood]:
        return self._run_all(requests, self._loglikelihood_one, progress)

    async def _loglikelihood_one(self, client: httpx.AsyncClient, request: LoglikelihoodRequest) -> Loglikelihood:
        context = self._context_text(request.context)
        whole = context + request.continuation
        # One generated token (some servers refuse max_tokens=0); it lies past the prompt and is ignored.
        body: dict[str, Any] = {"prompt": whole, "max_tokens": 1, "temperature": 0.0, "echo": True, "logprobs": 1}
        if self.model:
            body["model"] = self.model
        body.update(self.params)
        data = await self._post(client, next(self._next_base) + "/completions", body)
        lp = ((data.get("choices") or [{}])[0]).get("logprobs") or {}
        offsets, token_lp, top = lp.get("text_offset"), lp.get("token_logprobs"), lp.get("top_logprobs")
        if not offsets or not token_lp or len(offsets) != len(token_lp):
            raise ConfigError(
                "engine=openai", field="server_command",
                problem="multiple-choice tasks need a server that returns prompt log-probabilities (/v1/completions "
                        "with echo and logprobs, as vLLM does); this server returned none. Serve the variant with "
                        "vLLM, or run only generation tasks (evalset.tasks=[...])",
            )  # fmt: skip
        return continuation_score(offsets, token_lp, top, len(context), len(whole))

    def _context_text(self, context: Prompt) -> str:
        if isinstance(context, str):
            return context
        if self.chat_renderer is None:
            raise ConfigError("engine=openai", field="server_command",
                              problem="scoring a chat-style multiple-choice task needs the model's chat template, "
                                      "which is only known when the harness starts the server from a checkpoint "
                                      "folder; set model.prompt_style=plain or use engine.server_command")
        return self.chat_renderer(context)

    # ---- prompt log-probabilities ----------------------------------------------------------
    async def prompt_logprobs(self, prompts: list[list[int]], k: int) -> list[list[dict[int, float]]]:
        """Per prompt (token ids): for each position, the server's `k` most likely next tokens and
        their log-probabilities ({token id: logprob}), the last position's from one generated
        token. Needs a server that takes token-id prompts and names tokens by id (vLLM)."""
        gate = asyncio.Semaphore(self.concurrency)
        async with self.client(self.concurrency) as client:

            async def one(ids: list[int]) -> list[dict[int, float]]:
                body: dict[str, Any] = {"prompt": list(ids), "max_tokens": 1, "temperature": 0.0, "echo": True,
                                        "logprobs": k, "return_tokens_as_token_ids": True}
                if self.model:
                    body["model"] = self.model
                async with gate:
                    data = await self._post(client, next(self._next_base) + "/completions", body)
                top = (((data.get("choices") or [{}])[0]).get("logprobs") or {}).get("top_logprobs") or []
                # top[i] is the distribution token i was drawn from: top[1:] are positions 0 .. n-1.
                return [{_token_id(t): float(v) for t, v in (entry or {}).items()} for entry in top[1:]]

            return list(await asyncio.gather(*(one(p) for p in prompts)))

    # ---- plumbing ------------------------------------------------------------------------
    def _run_all(self, items: list[T], one: Callable[[httpx.AsyncClient, T], Awaitable[R]],
                 progress: Progress | None) -> list[R]:
        async def run() -> list[R]:
            gate = asyncio.Semaphore(self.concurrency)
            async with self.client(self.concurrency) as client:
                async def guarded(item: T) -> R:
                    async with gate:
                        out = await one(client, item)
                    if progress:
                        progress(1)
                    return out

                return list(await asyncio.gather(*(guarded(i) for i in items)))

        return asyncio.run(run()) if items else []

    async def _post(self, client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> dict[str, Any]:
        resp = await client.post(url, json=body)
        if resp.status_code >= 400:
            raise ServerError(f"{url} answered HTTP {resp.status_code}: {resp.text[:500]}")
        return resp.json()


def carries_token(chunk: dict[str, Any]) -> bool:
    """Does this streamed chunk carry a generated token? Its text may be empty (a token the
    detokenizer holds back until the next one completes a character, an end-of-sequence token):
    such a chunk still ends one inter-token gap, as vLLM's own benchmark counts it. Neither a
    usage-only chunk (no choices) nor a chat stream's opening chunk (its role, no text) does."""
    choices = chunk.get("choices") or []
    if not choices:
        return False
    c = choices[0]
    if "text" in c:
        return c["text"] is not None
    delta = c.get("delta") or {}
    content = delta.get("content")
    return content is not None and not (delta.get("role") and not content)


def _chunk_text(chunk: dict[str, Any]) -> str:
    choices = chunk.get("choices") or []
    if not choices:
        return ""
    c = choices[0]
    if c.get("text"):
        return str(c["text"])
    return str((c.get("delta") or {}).get("content") or "")


def continuation_score(offsets: list[int], token_lp: list[float | None], top: list[dict[str, float]] | None,
                       context_chars: int, total_chars: int) -> Loglikelihood:
    """Sum the log-probabilities of the prompt tokens that carry the continuation's characters.

    A token belongs to the continuation when it ends after the context and starts inside the prompt
    (a token merged across the boundary counts: the server tokenized the whole text at once).
    It is greedy when each token was the server's top choice.
    """
    ends = [*offsets[1:], total_chars + 1]
    picked = [i for i, (start, end) in enumerate(zip(offsets, ends)) if end > context_chars and start < total_chars]
    logprob, greedy = 0.0, True
    for i in picked:
        value = token_lp[i]
        if value is None:  # the very first prompt token has no log-probability
            continue
        logprob += float(value)
        alternatives = (top[i] if top and i < len(top) and top[i] else {}) or {}
        if alternatives and value < max(alternatives.values()) - 1e-6:
            greedy = False
    return Loglikelihood(logprob=logprob, tokens=len(picked), is_greedy=greedy)


def _token_id(name: str) -> int:
    """vLLM names a token "token_id:123" when asked to (return_tokens_as_token_ids)."""
    if not name.startswith("token_id:"):
        raise ServerError(f"the server named a token {name!r}, not by its id")
    return int(name[len("token_id:"):])
