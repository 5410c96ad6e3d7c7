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
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
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
    engine: OpenAIEngine  # spreads requests over every instance
    servers: list[ServerProcess] = field(default_factory=list)  # empty when attached to someone else's server

    @property
    def server(self) -> ServerProcess | None:
        """The (first) server the harness started, None when attached."""
        return self.servers[0] if self.servers else None

    @property
    def local(self) -> bool:
        """The server runs on this machine (its GPU use can be sampled here)."""
        return bool(self.servers) or httpx.URL(self.engine.base_url).host in (LOOPBACK, "localhost", "::1")

    def processes(self) -> list[psutil.Process]:
        return [p for s in self.servers for p in s.processes()]

    def metrics_urls(self) -> list[str]:
        return [root + "/metrics" for root in self.engine.root_urls]

    def requests_served(self) -> list[int | None]:
        """Requests each instance has finished so far, from its /metrics (vLLM's
        request_success counter); None for an instance that does not say."""
        from selector.serving.prometheus import counter

        out: list[int | None] = []
        for url in self.metrics_urls():
            try:
                value = counter(httpx.get(url, timeout=10.0, trust_env=False).text, "vllm:request_success")
            except (httpx.HTTPError, ValueError):
                value = None
            out.append(None if value is None else int(value))
        return out

    def check_alive(self, during: str) -> None:
        """ServerDiedError naming the first instance that has exited."""
        for server in self.servers:
            server.check_alive(during)


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
    """Start vLLM (engine.server=vllm; engine.vllm.instances servers) or engine.server_command for
    this checkpoint, or attach to engine.base_url.

    threads: CPU threads for a server the harness starts (OMP_NUM_THREADS), as the top-level
    `threads` setting gives the in-process engine, so both run on the same footing; vLLM instances
    split those cores between them."""
    key = api_key(cfg)
    if cfg.server_command or cfg.server == "vllm":
        if not model_path:
            raise ConfigError("engine", field="server_command", problem="needs a checkpoint folder to serve")
        served_model = cfg.served_model or model_path
        env = {**os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {})}
        if cfg.server == "vllm":
            from selector.serving import vllm

            python = vllm.python_for(cfg.vllm)
            shares = vllm.core_shares(threads, cfg.vllm.instances) or [None]
            envs = [{**env, **vllm.environment(cfg.vllm, cores)} for cores in shares]

            def argv_for(port: int) -> list[str]:
                return vllm.command(cfg, python, model_path=model_path, host=LOOPBACK, port=port, dtype=dtype,
                                    served_model=served_model)
        else:
            envs = [env]

            def argv_for(port: int) -> list[str]:
                return render_command(cfg.server_command, {"model_path": model_path, "port": port, "host": LOOPBACK,
                                                           "dtype": dtype, "served_model": served_model})

        servers = start_servers(argv_for, log_paths(Path(log_dir), len(envs)), envs, cfg.ready_timeout_s,
                                cfg.stop_timeout_s)
        engine = _engine(cfg, [s.root_url + "/v1" for s in servers], served_model, key, model_path)
        try:
            yield Served(engine, servers)
        except BaseException as e:
            for server in servers:
                server.stop(interrupted=not isinstance(e, Exception))
            raise
        for server in servers:
            server.stop()
        return
    if not cfg.base_url:
        raise ConfigError("engine", field="base_url",
                          problem="engine=openai needs either base_url (a running server) or server_command")
    log.warning("engine=openai attached to %s: the harness cannot check that it serves %s", cfg.base_url, model_path)
    engine = _engine(cfg, cfg.base_url, cfg.served_model or _first_model(cfg.base_url, key), key, model_path)
    yield Served(engine)


PORT_TRIES = 3


def log_paths(log_dir: Path, instances: int) -> list[Path]:
    """server.log for one server; server-1.log, server-2.log ... for several instances."""
    if instances == 1:
        return [log_dir / "server.log"]
    return [log_dir / f"server-{i}.log" for i in range(1, instances + 1)]


def start_servers(argv_for: Callable[[int], list[str]], logs: list[Path], envs: list[dict[str, str]],
                  ready_timeout_s: float, stop_timeout_s: float) -> list[ServerProcess]:
    """One ready server per (log, env) on a free loopback port, all starting at once (a vLLM start is
    mostly imports and loading, tens of seconds each). The port is free when picked but another
    process can take it before the server binds it: then that server fails with 'Address already in
    use' and another port is tried. If one fails otherwise, or the caller is interrupted, every
    server started is stopped before the error goes on.

    The servers are started from this thread, never a helper thread: each gets SIGTERM when the
    thread that started it ends (processes.die_with_parent); only the waiting is done on threads."""
    ready: list[ServerProcess | None] = [None] * len(logs)
    started: list[ServerProcess] = []
    try:
        for attempt in range(1, PORT_TRIES + 1):
            batch: dict[int, ServerProcess] = {}
            for i in (i for i, server in enumerate(ready) if server is None):
                port = free_port()
                batch[i] = ServerProcess(argv_for(port), f"http://{LOOPBACK}:{port}", logs[i], ready_timeout_s,
                                         stop_timeout_s, env=envs[i])
                batch[i].start()
                started.append(batch[i])
            for (i, server), error in zip(batch.items(), _wait_ready(list(batch.values()))):
                if error is None:
                    ready[i] = server
                    continue
                server.stop()
                if not isinstance(error, ServerStartError) or "address already in use" not in str(error).lower() \
                        or attempt == PORT_TRIES:
                    raise error
                log.warning("port %s was taken before the server bound it; trying another", server.root_url)
            if all(ready):
                return [server for server in ready if server is not None]
    except BaseException as e:
        for server in started:
            server.stop(interrupted=not isinstance(e, Exception))
        raise
    raise AssertionError("unreachable")


def start_on_free_port(argv_for: Callable[[int], list[str]], log_path: Path, ready_timeout_s: float,
                       stop_timeout_s: float, env: dict[str, str]) -> ServerProcess:
    """A started, ready server on a free loopback port (see start_servers)."""
    return start_servers(argv_for, [log_path], [env], ready_timeout_s, stop_timeout_s)[0]


def _wait_ready(servers: list[ServerProcess]) -> list[Exception | None]:
    """Wait for each server to answer (and listen on loopback only), side by side: the error of
    each, None for a ready one."""

    def ready(server: ServerProcess) -> Exception | None:
        try:
            server.wait_ready()
            server.check_loopback_only()
        except Exception as e:
            return e
        return None

    if len(servers) == 1:
        return [ready(servers[0])]
    pool = ThreadPoolExecutor(len(servers), thread_name_prefix="server-ready")
    try:  # not `with`: on Ctrl-C it would wait for every thread before the servers are stopped
        return list(pool.map(ready, servers))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _engine(cfg: EngineConfig, base_url: str | list[str], model: str | None, key: str | None,
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
