"""engine=openai: a server that is already running (vLLM, TGI, SGLang, llama.cpp, transformers
serve), attached by URL. Every variant of the sweep is sent to that one URL: the harness cannot
check what it serves, so sweep one variant at a time, or let the harness start a server per variant
(engine=vllm, engine=openai-transformers). The variant's checkpoint, when it is in the cache, still
gives the tokenizer (chat contexts, probes) and the weights' size; the server's memory is not this
machine's to read."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx

from selector.engines.served.running import (
    PREFIX_CACHE_RANGE,
    ServedRunning,
    ServerConfig,
    api_key,
    chat_template,
    tokenizer_of,
)
from selector.engines.spec import Engine, Range, StartContext

if TYPE_CHECKING:
    from selector.config import SelectorConfig
    from selector.origin import Origin

log = logging.getLogger("selector.engines.served.attached")


@dataclass
class AttachedEngineConfig(ServerConfig):
    kind: str = "openai"
    base_url: str = "http://127.0.0.1:8000/v1"


class AttachedEngine(Engine[AttachedEngineConfig]):
    kind = "openai"
    label = "openai"
    what = "an attached server (engine.base_url)"
    Config = AttachedEngineConfig
    needs_checkpoint = False  # the server holds the model; nothing is converted or quantized here
    ranges = (Range("batch_size", lambda v: v >= 1, "at least 1"), PREFIX_CACHE_RANGE)
    not_scored = ("prefix_cache",)

    def display_name(self) -> str:
        return f"openai ({self.config.base_url})"

    def deploy_name(self) -> str | None:
        return None  # whatever serves at that URL: the harness cannot tell

    def weights_held(self) -> str:
        return "unknown"  # whatever serves at that URL holds them its own way

    def prefix_cache(self) -> str:
        return self.config.prefix_cache  # unknown unless the user says what the server does

    def check(self, cfg: SelectorConfig, origin: Origin) -> None:
        if not self.config.base_url:
            raise origin.error("engine.base_url", "engine=openai attaches to a running server: give its URL "
                               "(or start one per variant: engine=vllm, engine=openai-transformers)")

    def start(self, ctx: StartContext) -> ServedRunning:
        from selector.engines.served.client import OpenAIClient

        config = self.config
        checkpoint = _cached_checkpoint(ctx)
        log.warning("engine=openai attached to %s: the harness cannot check that it serves %s", config.base_url,
                    checkpoint or ctx.cfg.model.name)
        key = api_key(config)
        tokenizer = tokenizer_of(checkpoint)
        client = OpenAIClient(config.base_url, config.served_model or _first_model(config.base_url, key), api_key=key,
                              chat=config.chat, concurrency=config.batch_size, timeout_s=config.request_timeout_s,
                              params=config.params, chat_renderer=chat_template(tokenizer),
                              cache_salt=config.prefix_cache == "salt")
        return ServedRunning("openai", client, tokenizer, [], dtype=ctx.cfg.precision.dtype,
                             planned_weights=ctx.planned_weight_bytes or 0)


def _cached_checkpoint(ctx: StartContext) -> str | None:
    """The variant's model folder when it is already converted here (for its tokenizer); nothing is
    converted or quantized for a server someone else runs."""
    from pathlib import Path

    from selector import models

    cfg = ctx.cfg
    try:
        where = {"precision": cfg.precision.name, "dtype": cfg.precision.dtype}
        if models.is_ready(cfg.model, Path(cfg.cache_dir), **where):
            return str(models.resolve(cfg.model, Path(cfg.cache_dir), progress=False, **where).path)
    except Exception as e:  # a hub model offline, a broken cache: the attached server is all there is
        log.info("no local copy of %s: %s", cfg.model.name, e)
    return None


def _first_model(base_url: str, key: str | None) -> str | None:
    """The id a server lists first under /v1/models (None: send requests without a model name)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        data = httpx.get(base_url.rstrip("/") + "/models", headers=headers, timeout=10.0).json()
        return str(data["data"][0]["id"])
    except Exception:
        return None
