"""engine=command: any OpenAI-compatible server, started by the harness for each variant from a
command template (engine.server_command, e.g. `transformers serve {model_path} --port {port}`) on a
free loopback port, in its own process group, its log kept as server.log in the variant's folder.
engine=openai-transformers is this engine with `transformers serve`'s command."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omegaconf import MISSING

from selector.engines.served.running import (
    PREFIX_CACHE_RANGE,
    ServedRunning,
    StartedServerConfig,
    api_key,
    chat_template,
    in_process_comparison,
    servable_checkpoint,
    tokenizer_of,
    unservable,
)
from selector.engines.spec import Engine, Range, StartContext

if TYPE_CHECKING:
    from selector.config import SelectorConfig
    from selector.origin import Origin


@dataclass
class CommandEngineConfig(StartedServerConfig):
    kind: str = "command"
    # The server started per variant; placeholders: {model_path} {port} {host} {dtype} {served_model}
    # (docs/load-testing.md). It must listen on {host} (loopback) at {port}.
    server_command: str = MISSING


class CommandEngine(Engine[CommandEngineConfig]):
    kind = "command"
    label = "server"
    what = "a server started per variant from engine.command"
    Config = CommandEngineConfig
    ranges = (Range("batch_size", lambda v: v >= 1, "at least 1"), PREFIX_CACHE_RANGE)
    not_scored = ("compare_in_process", "prefix_cache")

    def display_name(self) -> str:
        """The program the template starts (transformers, tgi, ...)."""
        from pathlib import Path

        words = str(self.config.server_command or "").split()
        return Path(words[0]).name.lower() if words else self.label

    def deploy_name(self) -> str | None:
        return self.display_name()

    def weights_held(self) -> str:
        return "unknown"  # whatever the command starts holds them its own way

    def in_process_comparison(self) -> Engine[Any] | None:
        return in_process_comparison(self.config)

    def prefix_cache(self) -> str:
        return self.config.prefix_cache

    def check(self, cfg: SelectorConfig, origin: Origin) -> None:
        from selector.errors import ConfigError
        from selector.engines.served.process import render_command

        try:  # unknown placeholders, no {port}: now, not each variant when its server will not start
            render_command(self.config.server_command, dict.fromkeys(
                ("model_path", "port", "host", "dtype", "served_model"), "x"))
        except ConfigError as e:
            raise origin.error("engine.server_command", e.problem) from None

    def unavailable(self, cfg: SelectorConfig) -> str | None:
        return unservable(cfg)

    def start(self, ctx: StartContext) -> ServedRunning:
        from selector.engines.served.client import OpenAIClient
        from selector.engines.served.process import LOOPBACK, render_command
        from selector.engines.served.servers import log_paths, start_servers

        config, cfg = self.config, ctx.cfg
        checkpoint, quant = servable_checkpoint(ctx)
        served_model = config.served_model or checkpoint
        env = {**os.environ, **({"OMP_NUM_THREADS": str(cfg.threads)} if cfg.threads else {})}

        def argv_for(port: int) -> list[str]:
            return render_command(config.server_command, {"model_path": checkpoint, "port": port, "host": LOOPBACK,
                                                          "dtype": cfg.precision.dtype, "served_model": served_model})

        t0 = time.perf_counter()
        servers = start_servers(argv_for, log_paths(ctx.job_dir, 1), [env], config.ready_timeout_s,
                                config.stop_timeout_s)
        try:
            tokenizer = tokenizer_of(checkpoint)
            client = OpenAIClient([s.root_url + "/v1" for s in servers], served_model, api_key=api_key(config),
                                  chat=config.chat, concurrency=config.batch_size, timeout_s=config.request_timeout_s,
                                  params=config.params, chat_renderer=chat_template(tokenizer),
                                  cache_salt=config.prefix_cache == "salt")
            running = ServedRunning(self.display_name(), client, tokenizer, servers, quant=quant, checkpoint=checkpoint,
                                    dtype=cfg.precision.dtype)
        except BaseException as e:
            for server in servers:
                server.stop(interrupted=not isinstance(e, Exception))
            raise
        running.start_s = time.perf_counter() - t0
        return running
