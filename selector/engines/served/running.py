"""What every engine behind an OpenAI-compatible server shares: its config's client side, and the
running engine the variant is evaluated and measured through.

The server is the only copy of the model: the worker never loads it. Evaluation goes through
/v1/completions and /v1/chat/completions (engines/served/client.py), every timed figure through one
streamed request per `send`, fidelity through the prompt log-probabilities the server returns, and
memory is read off the server's own processes (engines/served/footprint.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from selector.config import EngineConfig
from selector.generation import Evaluator, Generation, GenerationRequest, Loglikelihood, LoglikelihoodRequest, Progress
from selector.engines.spec import Batching, Channel, Engine, EngineInfo, Range, Running, StartContext, TopLogprobs
from selector.errors import ConfigError, UnavailableError

if TYPE_CHECKING:
    from selector.records import MemoryResult

log = logging.getLogger("selector.engines.served.running")


@dataclass
class ServerConfig(EngineConfig):
    """The client's side of every server engine."""

    kind: str = ""
    served_model: str | None = None  # the model name requests use (null: as the engine decides)
    batch_size: int = 8  # evaluation requests in flight at once
    request_timeout_s: float = 300.0
    chat: bool = True  # chat-style prompts go to /v1/chat/completions
    params: dict[str, Any] = field(default_factory=dict)  # extra fields sent with every request
    api_key_env: str | None = None  # the NAME of an environment variable holding the key (never the key)
    # What the server's prefix cache does with the measurements' requests (docs/load-testing.md,
    # "Fresh prompts"): salt = it takes vLLM's per-request `cache_salt`, which selector sends so a
    # request reuses only the cached prompt its traffic declares; none = it keeps no prefix cache
    # across requests (nothing to isolate); unknown = it may, and nothing isolates the requests
    # (the sweep warns before anything loads: hit rates and throughput may be inflated).
    prefix_cache: str = "unknown"


@dataclass
class StartedServerConfig(ServerConfig):
    """A server the harness starts per variant from the variant's checkpoint."""

    ready_timeout_s: float = 600.0
    stop_timeout_s: float = 20.0  # SIGTERM to the server's process group, then SIGKILL after this long
    # Also evaluate the same checkpoint in-process (transformers) before the server starts, and
    # record per task how many answers differ (record.agreement).
    compare_in_process: bool = False


def in_process_comparison(config: StartedServerConfig) -> Engine[Any] | None:
    """The in-process engine at engine=hf's defaults when config.compare_in_process asks for the
    comparison (a started server's Engine.in_process_comparison), else None."""
    if not config.compare_in_process:
        return None
    from selector.engines.inprocess.engine import HfEngineConfig, InProcessEngine

    return InProcessEngine(HfEngineConfig())


PREFIX_CACHE_MODES = ("salt", "none", "unknown")
PREFIX_CACHE_RANGE = Range("prefix_cache", lambda v: v in PREFIX_CACHE_MODES,
                           "salt (the server takes vLLM's cache_salt), none (it keeps no prefix cache across "
                           "requests) or unknown")


def api_key(config: ServerConfig) -> str | None:
    if not config.api_key_env:
        return None
    key = os.environ.get(config.api_key_env)
    if not key:
        raise ConfigError("engine", field="api_key_env",
                          problem=f"the environment variable {config.api_key_env} is not set (it should hold the API key)")
    return key


def servable_checkpoint(ctx: StartContext) -> tuple[str, Any]:
    """(the folder a server loads for this variant, its QuantInfo): the precision's artifact in the
    cache (quantized first if the preparation process did not), else the resolved model folder.
    Nothing is loaded into this process."""
    from selector.precisions import load_variant
    from selector.precisions.calibration import calibration_texts

    cfg = ctx.cfg
    resolved, prepared = load_variant(cfg.model, cfg.precision, cfg.cache_dir, ctx.device, calibration=cfg.calibration,
                                      calibration_texts=lambda: calibration_texts(cfg.calibration, ctx.tasks),
                                      prepare_only=True, progress=False)
    if prepared.artifact_dir:
        return str(prepared.artifact_dir), prepared.quant
    if cfg.precision.backend == "native" or resolved.prequantized:  # a hub id: the server fetches it
        return str(resolved.path), prepared.quant
    raise UnavailableError(f"precision={cfg.precision.name} quantizes while loading and leaves no checkpoint a server "
                           "could load (use engine=hf, or a precision that saves an artifact)")


def unservable(cfg: Any) -> str | None:
    """Why no server can load this precision (it exists only in memory after loading), or None."""
    from selector.precisions import get_backend

    backend = get_backend(cfg.precision.backend)
    if backend.name == "native" or backend.builds_artifact or cfg.precision.name in cfg.model.prequantized:
        return None
    return (f"not servable: precision={cfg.precision.name} ({backend.name}) quantizes while loading in transformers "
            "and leaves no checkpoint a server could load")


def tokenizer_of(path: str | None) -> Any:
    """The checkpoint's tokenizer (probes, synthetic prompts, chat contexts), None when there is none."""
    if not path or not Path(path).is_dir():
        return None
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path)
    except Exception as e:  # a folder without a tokenizer: chat scoring and fidelity are unavailable
        log.info("no tokenizer in %s: %s", path, e)
        return None


def chat_template(tokenizer: Any) -> Any:
    """The model's own chat template as text, for scoring chat contexts through /v1/completions."""
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return None
    return lambda messages: tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


class ServedRunning(Running):
    """One variant behind one or more servers (or an attached one). Subclasses add what their
    server says about itself (vLLM: its kernels, KV pool and usage)."""

    start_s: float | None = None  # seconds from launching the servers to their being ready (started here)

    def __init__(self, name: str, client: Any, tokenizer: Any, servers: list[Any], *, quant: Any = None,
                 checkpoint: str | None = None, dtype: str = "bfloat16", token_ids: bool = False,
                 max_logprobs: int | None = None, planned_weights: int = 0) -> None:
        from selector.engines.served.footprint import ServerFootprint

        self.name, self.client, self.tokenizer, self.servers = name, client, tokenizer, servers
        self.planned_weights = planned_weights  # plan's estimate, for a server whose checkpoint is not here
        self.quant, self.checkpoint, self.dtype = quant, checkpoint, dtype
        self.token_ids, self.max_logprobs = token_ids, max_logprobs
        self.footprint = ServerFootprint(servers, self.metrics_urls(), self.kv_pool_bytes)
        self.footprint.start()  # from ready on: what serving it holds

    # ---- evaluation -----------------------------------------------------------------------------
    def generate(self, requests: list[GenerationRequest], progress: Progress | None = None) -> list[Generation]:
        return self.client.generate(requests, progress)

    def loglikelihood(self, requests: list[LoglikelihoodRequest],
                      progress: Progress | None = None) -> list[Loglikelihood]:
        return self.client.loglikelihood(requests, progress)

    def render(self, prompt: Any) -> str:
        return self.client.render(prompt)

    def rebatched(self, batch_size: int) -> Evaluator:
        return self.client.with_concurrency(batch_size)

    # ---- timed requests -----------------------------------------------------------------------
    @asynccontextmanager
    async def session(self, batching: Batching) -> AsyncIterator[Channel]:
        """Streamed requests over one HTTP client; the server batches them as it was started to."""
        from selector.engines.conversations import Conversations
        from selector.resources.utilization import UtilizationMonitor, own_process, process_cpu_seconds
        from selector.engines.served import metrics as prometheus

        this_process = own_process()
        urls = self.metrics_urls()
        async with self.client.client(max_connections=None) as http:

            async def send(request: Any) -> Any:
                return await self.client.stream(http, request)

            def monitor() -> UtilizationMonitor:
                # Everything this process does during a level is the load generator's work.
                harness = lambda: sum(process_cpu_seconds(this_process).values())  # noqa: E731
                return UtilizationMonitor(self.processes if self.servers else None, harness,
                                          None if self.local else [], subtract_harness=False)

            yield Channel(Conversations().wrap(send), monitor, scrape=lambda: prometheus.scrape_all(http, urls),
                          split=prometheus.level_split, describe_split=prometheus.split_source,
                          counters=lambda: prometheus.scrape_counters(http, urls),
                          prefix_cache_hit_rate=prometheus.prefix_cache_hit_rate)

    def warm(self, ids: list[list[int]], new_tokens: int) -> None:
        """A server compiles its own shapes (at start, or in the measurement's warm-up requests)."""

    # ---- fidelity -----------------------------------------------------------------------------
    def token_logprobs(self, prompts: list[list[int]], positions: int) -> Iterator[TopLogprobs]:
        """The top `max_logprobs` of each of the last `positions` next-token distributions, from the
        prompt log-probabilities the server returns (/v1/completions with the prompt as token ids)."""
        if not self.token_ids or not self.max_logprobs:
            raise UnavailableError(f"{self.name} returns no prompt log-probabilities by token id")
        for got in asyncio.run(self.client.prompt_logprobs(prompts, self.max_logprobs)):
            yield top_of(got, positions)

    # ---- memory and what ran ------------------------------------------------------------------
    def kv_pool_bytes(self) -> int | None:
        """The KV cache each instance preallocates (None: the server does not say)."""
        return None

    def weight_bytes(self) -> int | None:
        """The weights as served: from the checkpoint, each floating tensor at the served dtype."""
        from selector.engines.served.footprint import checkpoint_weight_bytes

        return checkpoint_weight_bytes(self.checkpoint, self.dtype) if self.checkpoint else None

    def memory(self) -> MemoryResult:
        from selector.precisions.base import dir_bytes

        artifact = self.quant.artifact_bytes if self.quant and self.quant.artifact_bytes else None
        weights = self.weight_bytes()
        result = self.footprint.result(weights if weights is not None else self.planned_weights,
                                       artifact or dir_bytes(self.checkpoint))
        if weights is None:  # a server someone else runs: the weights are plan's estimate, said so
            result.weights_source = "plan"
        return result

    def serving_info(self) -> Any:
        return None

    def info(self) -> EngineInfo:
        return EngineInfo(quant=self.quant, serving=self.serving_info())

    # ---- the servers ---------------------------------------------------------------------------
    @property
    def local(self) -> bool:
        """The server runs on this machine (its GPU use can be sampled here)."""
        from selector.engines.served.process import LOOPBACK

        return bool(self.servers) or httpx.URL(self.client.base_url).host in (LOOPBACK, "localhost", "::1")

    def processes(self) -> list[Any]:
        return [p for s in self.servers for p in s.processes()]

    def metrics_urls(self) -> list[str]:
        return [root + "/metrics" for root in self.client.root_urls]

    def check_alive(self, during: str, grace_s: float = 0.0) -> None:
        for server in self.servers:
            server.check_alive(during, grace_s)

    def stop(self, interrupted: bool = False) -> None:
        self.footprint.stop()
        for server in self.servers:
            server.stop(interrupted=interrupted)


def top_of(got: list[dict[int, float]], positions: int) -> TopLogprobs:
    """The last `positions` entries of a prompt's per-position {token id: log-probability} as
    tensors, most likely first; a position given fewer tokens is padded with -inf (no mass)."""
    import torch

    rows = got[-positions:]
    k = max(len(r) for r in rows)
    ids = torch.full((len(rows), k), -1, dtype=torch.int64)  # -1: no token (never a baseline's)
    logp = torch.full((len(rows), k), float("-inf"), dtype=torch.float32)
    for i, row in enumerate(rows):
        ranked = sorted(row.items(), key=lambda kv: -kv[1])
        ids[i, : len(ranked)] = torch.tensor([t for t, _ in ranked])
        logp[i, : len(ranked)] = torch.tensor([v for _, v in ranked])
    return TopLogprobs(logp, ids)
