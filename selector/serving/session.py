"""One variant behind an OpenAI-compatible server: start it (or attach to a URL), hand out the
engine, stop it on the way out whatever happened.

The checkpoint served is the one the variant produced: its quantized artifact folder, else the
resolved base model. A precision that quantizes only at load time (bitsandbytes) leaves no folder
a server could load, so such a variant is skipped rather than silently served at full precision.
"""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

from selector.config import EngineConfig, PrecisionConfig
from selector.engines.base import Messages
from selector.engines.openai import OpenAIEngine
from selector.errors import ConfigError, UnavailableError
from selector.serving.process import LOOPBACK, ServerProcess, ServerStartError, free_port, render_command

log = logging.getLogger("selector.serving.session")


@dataclass
class Served:
    engine: OpenAIEngine
    server: ServerProcess | None  # None when attached to a server someone else runs

    @property
    def local(self) -> bool:
        """The server runs on this machine (its GPU use can be sampled here)."""
        return self.server is not None or httpx.URL(self.engine.base_url).host in (LOOPBACK, "localhost", "::1")

    def processes(self) -> list[psutil.Process]:
        return self.server.processes() if self.server else []


def serving_checkpoint(loaded: Any, resolved: Any, precision: PrecisionConfig) -> str:
    """The folder (or hub id) a server should load for this variant."""
    if loaded.artifact_dir:
        return str(loaded.artifact_dir)
    if precision.backend == "native":
        return str(resolved.path)
    raise UnavailableError(
        f"precision={precision.name} quantizes while loading and leaves no checkpoint a server could load; "
        "engine=openai serves saved checkpoints only (use engine=hf, or a precision that saves an artifact)"
    )


def release_model(loaded: Any) -> None:
    """Drop the in-process copy so the server has the memory (and the GPU) to itself."""
    loaded.model = None
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass


def api_key(cfg: EngineConfig) -> str | None:
    if not cfg.api_key_env:
        return None
    key = os.environ.get(cfg.api_key_env)
    if not key:
        raise ConfigError("engine", field="api_key_env",
                          problem=f"the environment variable {cfg.api_key_env} is not set (it should hold the API key)")
    return key


def chat_renderer(tokenizer_path: str | None) -> Callable[[Messages], str] | None:
    """The model's own chat template as text, for scoring chat contexts through /v1/completions."""
    if not tokenizer_path:
        return None
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tokenizer_path)
    except Exception as e:  # no tokenizer there (a hub id offline, a GGUF server): chat scoring unavailable
        log.info("no chat template from %s: %s", tokenizer_path, e)
        return None
    if not getattr(tok, "chat_template", None):
        return None
    return lambda messages: tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


@contextmanager
def served_engine(cfg: EngineConfig, *, model_path: str | None, dtype: str, log_dir: Path,
                  threads: int | None = None) -> Iterator[Served]:
    """Start vLLM (engine.server=vllm) or engine.server_command for this checkpoint, or attach to
    engine.base_url.

    threads: CPU threads for a server the harness starts (OMP_NUM_THREADS), as the top-level
    `threads` setting gives the in-process engine, so both run on the same footing."""
    key = api_key(cfg)
    if cfg.server_command or cfg.server == "vllm":
        if not model_path:
            raise ConfigError("engine", field="server_command", problem="needs a checkpoint folder to serve")
        served_model = cfg.served_model or model_path
        env = {**os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {})}
        python = None
        if cfg.server == "vllm":
            from selector.serving import vllm

            python = vllm.python_for(cfg.vllm)
            env.update(vllm.environment(cfg.vllm, threads))

        def argv_for(port: int) -> list[str]:
            if python is not None:
                return vllm.command(cfg, python, model_path=model_path, host=LOOPBACK, port=port, dtype=dtype,
                                    served_model=served_model)
            return render_command(cfg.server_command, {"model_path": model_path, "port": port, "host": LOOPBACK,
                                                       "dtype": dtype, "served_model": served_model})

        server = start_on_free_port(argv_for, Path(log_dir) / "server.log", cfg.ready_timeout_s, cfg.stop_timeout_s,
                                    env)
        try:
            yield Served(_engine(cfg, server.root_url + "/v1", served_model, key, model_path), server)
        except BaseException as e:
            server.stop(interrupted=not isinstance(e, Exception))
            raise
        server.stop()
        return
    if not cfg.base_url:
        raise ConfigError("engine", field="base_url",
                          problem="engine=openai needs either base_url (a running server) or server_command")
    log.warning("engine=openai attached to %s: the harness cannot check that it serves %s", cfg.base_url, model_path)
    engine = _engine(cfg, cfg.base_url, cfg.served_model or _first_model(cfg.base_url, key), key, model_path)
    yield Served(engine, None)


PORT_TRIES = 3


def start_on_free_port(argv_for: Callable[[int], list[str]], log_path: Path, ready_timeout_s: float,
                       stop_timeout_s: float, env: dict[str, str]) -> ServerProcess:
    """A started, ready server on a free loopback port. The port is free when picked but another
    process can take it before the server binds it: then the server fails with 'Address already in
    use' and another port is tried."""
    for attempt in range(1, PORT_TRIES + 1):
        port = free_port()
        server = ServerProcess(argv_for(port), f"http://{LOOPBACK}:{port}", log_path, ready_timeout_s, stop_timeout_s,
                               env=env)
        try:
            return server.__enter__()  # stops the server itself if it fails
        except ServerStartError as e:
            if "address already in use" not in str(e).lower() or attempt == PORT_TRIES:
                raise
            log.warning("port %d was taken before the server bound it; trying another", port)
    raise AssertionError("unreachable")


def _engine(cfg: EngineConfig, base_url: str, model: str | None, key: str | None,
            tokenizer_path: str | None) -> OpenAIEngine:
    return OpenAIEngine(base_url, model, api_key=key, chat=cfg.chat, concurrency=cfg.batch_size,
                        timeout_s=cfg.request_timeout_s, params=cfg.params, chat_renderer=chat_renderer(tokenizer_path))


def _first_model(base_url: str, key: str | None) -> str | None:
    """The id a server lists first under /v1/models (None: send requests without a model name)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        data = httpx.get(base_url.rstrip("/") + "/models", headers=headers, timeout=10.0).json()
        return str(data["data"][0]["id"])
    except Exception:
        return None
