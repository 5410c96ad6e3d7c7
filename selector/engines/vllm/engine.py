"""engine=vllm: vLLM's OpenAI-compatible server, started by the harness for each variant from the
variant's checkpoint (its quantized artifact, or the model folder), on free loopback ports, in its
own process groups, one server per `engine.vllm.instances` with the cores split between them.

How the command is built, where vLLM is found and what its log says are selector/engines/vllm/launch.py.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from selector.engines.served.running import (
    PREFIX_CACHE_RANGE,
    ServedRunning,
    StartedServerConfig,
    api_key,
    chat_template,
    in_process_comparison,
    servable_checkpoint,
    tokenizer_of,
)
from selector.engines.spec import Engine, Knob, Range, StartContext

if TYPE_CHECKING:
    from selector.config import SelectorConfig
    from selector.origin import Origin

log = logging.getLogger("selector.engines.vllm.engine")


@dataclass
class VllmConfig:
    """How the harness starts vLLM (engine.vllm.*); max_num_seqs, max_num_batched_tokens and
    instances may be swept."""

    # The Python that has vLLM installed. null: $SELECTOR_VLLM_PYTHON, else .venv-vllm/bin/python in
    # the checkout (`make vllm` creates it), else `python` on PATH if it can import vllm.
    python: str | None = None
    kv_cache_gib: float = 2.0  # VLLM_CPU_KVCACHE_SPACE: the KV cache vLLM reserves on CPU, in whole GiB
    enforce_eager: bool = False  # skip torch.compile at start-up (tests); deployments compile
    max_num_seqs: int | None = None  # --max-num-seqs: requests batched at once (null: vLLM's default)
    max_num_batched_tokens: int | None = None  # --max-num-batched-tokens per scheduler step
    max_model_len: int | None = None  # --max-model-len (null: the model's own)
    # Servers per variant on this machine, the cores (`threads`, else all) split evenly between them
    # and the requests spread over them round-robin: the multi-instance CPU deployment.
    instances: int = 1
    args: list[str] = field(default_factory=list)  # further flags, passed as given, e.g. [--seed, "1"]


@dataclass
class VllmEngineConfig(StartedServerConfig):
    kind: str = "vllm"
    served_model: str | None = "variant"
    batch_size: int = 32
    request_timeout_s: float = 600.0
    ready_timeout_s: float = 900.0  # the first start compiles (about 90 s for a 135M model on 2 cores)
    stop_timeout_s: float = 30.0
    prefix_cache: str = "salt"  # vLLM takes a per-request cache_salt
    vllm: VllmConfig = field(default_factory=VllmConfig)


MAX_LOGPROBS = 20  # --max-logprobs: multiple-choice scoring and fidelity read this many per position
GB = 10**9
# What a vLLM CPU server holds before any weights or KV cache: its three processes (API server,
# engine core, worker), each with torch, and with torch.compile on, the compiled graphs. Measured
# with vllm-cpu 0.32.0 (memory.runtime_rss_bytes: resident at ready, less the pool and the weights):
# SmolLM2-135M compiled 2.59 GB; a tiny Llama with --enforce-eager 1.99 GB (docs/memory.md).
CPU_RUNTIME_BYTES = {"compiled": int(2.6 * GB), "eager": int(2.0 * GB)}


class VllmEngine(Engine[VllmEngineConfig]):
    kind = "vllm"
    label = "vllm"
    Config = VllmEngineConfig
    knobs = (Knob("engine.vllm.max_num_seqs", "max_num_seqs", "at least 1 (or null for vLLM's default)",
                  lambda v: v is None or v >= 1),
             Knob("engine.vllm.max_num_batched_tokens", "max_num_batched_tokens",
                  "at least 1 (or null for vLLM's default)", lambda v: v is None or v >= 1),
             Knob("engine.vllm.instances", "instances", "at least 1", lambda v: v >= 1))
    ranges = (Range("batch_size", lambda v: v >= 1, "at least 1"),
              Range("vllm.kv_cache_gib", lambda v: v >= 1 and float(v).is_integer(),
                    "a whole number of GiB, at least 1 (vLLM's CPU build reads VLLM_CPU_KVCACHE_SPACE as one)"),
              Range("vllm.max_num_seqs", lambda v: v >= 1, "at least 1 (or null for vLLM's default)"),
              Range("vllm.max_num_batched_tokens", lambda v: v >= 1, "at least 1 (or null for vLLM's default)"),
              Range("vllm.max_model_len", lambda v: v >= 1, "at least 1 (or null for the model's own)"),
              Range("vllm.instances", lambda v: v >= 1, "at least 1"), PREFIX_CACHE_RANGE)
    # Where vLLM is found, its KV pool and scheduling limits change how requests are scheduled,
    # not what it answers (like the in-process batcher's knobs): settings share scored items.
    not_scored = ("compare_in_process", "prefix_cache", "vllm.python", "vllm.kv_cache_gib", "vllm.max_num_seqs",
                  "vllm.max_num_batched_tokens")

    def measure_material(self) -> dict[str, Any]:
        return {k: v for k, v in super().measure_material().get("vllm", {}).items() if k != "python"}

    def context_limit(self) -> int | None:
        return self.config.vllm.max_model_len

    def copies(self) -> int:
        return self.config.vllm.instances

    def in_process_comparison(self) -> Engine[Any] | None:
        return in_process_comparison(self.config)

    def prefix_cache(self) -> str:
        return self.config.prefix_cache

    def load_advice(self, layer: str, knobs: dict[str, Any], concurrency: int | None) -> str:
        """The knobs a sweep can vary (engine.vllm.max_num_seqs, instances), with their values."""
        if layer != "queue":
            return super().load_advice(layer, knobs, concurrency)
        seqs = f"now {knobs['max_num_seqs']}" if knobs.get("max_num_seqs") else "now vLLM's default"
        return (f"sweep engine.vllm.max_num_seqs ({seqs}) to run more requests at once, or "
                f"engine.vllm.instances (now {knobs.get('instances') or 1}) to spread them over servers")

    def weights_held(self) -> str:
        return "as-saved"  # the checkpoint as saved, on vLLM's own packed kernels (compressed-tensors, int8 GEMMs)

    def planned_runtime_bytes(self, device: str) -> int | None:
        """vLLM's own runtime, per server, on CPU (measured); on a GPU not measured yet (its CUDA
        context and graphs), so plan gives no serving estimate there."""
        if device.startswith("cuda"):
            return None
        mode = "eager" if self.config.vllm.enforce_eager else "compiled"
        return CPU_RUNTIME_BYTES[mode] * self.config.vllm.instances

    def check(self, cfg: SelectorConfig, origin: Origin) -> None:
        from selector.engines.vllm import launch as vllm

        vllm.check_harness_flags(self.config.vllm)
        python = vllm.python_for(self.config.vllm)  # vLLM not installed: one line naming the install command
        vllm.check_args(self.config.vllm, python)  # a flag this vLLM does not have
        vllm.placements(cfg.threads, self.config.vllm.instances)  # more instances than cores

    def unavailable(self, cfg: SelectorConfig) -> str | None:
        from selector.engines.vllm.launch import not_servable

        return not_servable(cfg.precision)

    def start(self, ctx: StartContext) -> VllmRunning:
        from selector.engines.served.client import OpenAIClient
        from selector.engines.vllm import launch as vllm
        from selector.engines.served.process import LOOPBACK
        from selector.engines.served.servers import log_paths, start_servers

        config, cfg = self.config, ctx.cfg
        checkpoint, quant = servable_checkpoint(ctx)
        served_model = config.served_model or checkpoint
        python = vllm.python_for(config.vllm)
        env = {**os.environ, **({"OMP_NUM_THREADS": str(cfg.threads)} if cfg.threads else {})}
        envs = [{**env, **vllm.environment(config.vllm, placement)}
                for placement in vllm.placements(cfg.threads, config.vllm.instances)]

        def argv_for(port: int) -> list[str]:
            return vllm.command(config.vllm, python, model_path=checkpoint, host=LOOPBACK, port=port,
                                dtype=cfg.precision.dtype, served_model=served_model, max_logprobs=MAX_LOGPROBS)

        t0 = time.perf_counter()
        servers = start_servers(argv_for, log_paths(ctx.job_dir, len(envs)), envs, config.ready_timeout_s,
                                config.stop_timeout_s)
        start_s = time.perf_counter() - t0
        try:
            tokenizer = tokenizer_of(checkpoint)
            client = OpenAIClient([s.root_url + "/v1" for s in servers], served_model, api_key=api_key(config),
                                  chat=config.chat, concurrency=config.batch_size, timeout_s=config.request_timeout_s,
                                  params=config.params, chat_renderer=chat_template(tokenizer), extensions=True,
                                  cache_salt=config.prefix_cache == "salt")
            return VllmRunning(config, client, tokenizer, servers, quant=quant, checkpoint=checkpoint,
                               dtype=cfg.precision.dtype, start_s=start_s)
        except BaseException as e:
            for server in servers:
                server.stop(interrupted=not isinstance(e, Exception))
            raise


class VllmRunning(ServedRunning):
    def __init__(self, config: VllmEngineConfig, client: Any, tokenizer: Any, servers: list[Any], *, quant: Any,
                 checkpoint: str, dtype: str, start_s: float) -> None:
        self.config = config
        self.start_s: float = start_s
        super().__init__("vllm", client, tokenizer, servers, quant=quant, checkpoint=checkpoint, dtype=dtype,
                         token_ids=True, max_logprobs=MAX_LOGPROBS)

    def _log(self) -> str:
        try:
            return self.servers[0].log_path.read_text(errors="replace")
        except OSError:
            return ""

    def kv_pool_bytes(self) -> int | None:
        from selector.engines.vllm.launch import kv_pool_bytes

        return kv_pool_bytes(self._log())

    def weight_bytes(self) -> int | None:
        """vLLM's own figure where it gives one (CUDA: "Model loading took X GiB"), else the
        checkpoint's tensors at the served dtype."""
        from selector.engines.vllm.launch import reported_weight_bytes

        return reported_weight_bytes(self._log()) or super().weight_bytes()

    def memory(self) -> Any:
        from selector.engines.vllm.launch import reported_weight_bytes

        result = super().memory()
        if reported_weight_bytes(self._log()):
            result.weights_source = "vllm"
        return result

    def serving_info(self) -> Any:
        from selector.engines.vllm.launch import serving_info

        info = serving_info(self.servers, self.start_s)
        info.requests = self.requests_served()
        return info

    def requests_served(self) -> list[int | None]:
        """Requests each instance has finished so far, from its /metrics (vllm:request_success)."""
        import httpx

        from selector.engines.served.metrics import counter

        out: list[int | None] = []
        for url in self.metrics_urls():
            try:
                value = counter(httpx.get(url, timeout=10.0, trust_env=False).text, "vllm:request_success")
            except (httpx.HTTPError, ValueError):
                value = None
            out.append(None if value is None else int(value))
        return out

