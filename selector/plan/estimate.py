"""Memory a variant needs, estimated from its architecture alone.

Weight memory is each precision backend's own estimate (`Backend.estimate_weights`, next to the
code that loads it): counted per tensor the way it holds them on that device with that engine. The
KV cache is sized at a batch and context; activations and a fixed reserve are rough allowances,
stated as such.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from selector.config import PrecisionConfig, SelectorConfig
from selector.plan.arch import ArchFacts, read_arch
from selector.precisions.weights import DTYPE_BYTES, IN_PROCESS, UNKNOWN, WeightEstimate, dense

GIB = 2**30
__all__ = ["DTYPE_BYTES", "GIB", "WeightEstimate", "estimate_weights", "kv_cache_bytes", "plan_row"]


def estimate_weights(arch: ArchFacts, precision: PrecisionConfig, device: str, holding: str = IN_PROCESS,
                     prequantized: bool = False) -> WeightEstimate:
    """Bytes the loaded weights occupy on `device` ("cpu" or "cuda") held as `holding` says (how the
    engine holds them: weights_held(cfg))."""
    from selector.precisions import get_backend
    from selector.registry import UnknownNameError

    try:
        backend = get_backend(precision.backend)
    except UnknownNameError:
        return dense(arch, precision, f"{precision.dtype} (unknown backend {precision.backend!r}: unquantized)")
    est = backend.estimate_weights(arch, precision, device, holding, prequantized)
    if holding == UNKNOWN:
        est.notes.append("the server's own layout is not known here: counted as transformers holds them")
    return est


def weights_held(cfg: SelectorConfig) -> str:
    """How the variant's engine holds its weights, as the engine says (Engine.weights_held)."""
    from selector.engines import engine_for
    from selector.validate import typed_engine

    return str(engine_for(typed_engine(cfg.engine)).weights_held())


def kv_cache_bytes(arch: ArchFacts, batch: int, context: int, dtype: str) -> int:
    """Keys and values of every layer for `batch` sequences of `context` tokens."""
    per_token = 2 * arch.kv_dim * DTYPE_BYTES.get(dtype, 2)
    return batch * per_token * sum(arch.kv_tokens_per_layer(context))


def activation_bytes(arch: ArchFacts, batch: int, context: int, dtype: str) -> int:
    """A rough allowance for the largest prefill transients (one layer's MLP and attention inputs,
    fp32 logits of the last position): an order of magnitude, not a measurement."""
    width = 4 * arch.hidden_size + 3 * arch.intermediate_size
    return batch * context * width * DTYPE_BYTES.get(dtype, 2) + batch * arch.vocab_size * 4


@dataclass
class PlanRow:
    variant: str
    params: int | None
    weight_bytes: int | None
    kv_bytes: int | None
    activation_bytes: int | None
    total_bytes: int | None
    fits: bool | None
    layout: str
    arch_source: str
    notes: list[str] = field(default_factory=list)


def plan_row(cfg: SelectorConfig, *, batch: int, context: int, gpu_gib: float | None, device: str,
             reserve_gib: float = 0.0) -> PlanRow:
    name = f"{cfg.model.name}/{cfg.precision.name}"
    arch = read_arch(cfg.model, Path(cfg.cache_dir))
    if arch is None:
        return PlanRow(name, None, None, None, None, None, None, "", "unknown",
                       [f"no config.json for {cfg.model.name}: set arch_config in conf/model/{cfg.model.name}.yaml"])
    est = estimate_weights(arch, cfg.precision, device, weights_held(cfg),
                           prequantized=cfg.precision.name in cfg.model.prequantized)
    kv = kv_cache_bytes(arch, batch, context, cfg.precision.dtype)
    act = activation_bytes(arch, batch, context, cfg.precision.dtype)
    total = est.bytes + kv + act + int(reserve_gib * GIB)
    fits = None if gpu_gib is None else total <= gpu_gib * GIB
    return PlanRow(name, arch.params, est.bytes, kv, act, total, fits, est.layout, arch.source, est.notes)


def planned_weight_bytes(cfg: SelectorConfig, device: str) -> tuple[float, str]:
    """The weight memory the search orders variants by, and where the figure came from: the
    per-tensor estimate when the architecture is known here, else parameters x bits (rough: it
    counts embeddings at the quantized width), said so."""
    from selector.selection.precision import precision_bits

    arch = read_arch(cfg.model, Path(cfg.cache_dir).expanduser())
    if arch is not None:
        prequantized = cfg.precision.name in cfg.model.prequantized
        est = estimate_weights(arch, cfg.precision, device, weights_held(cfg), prequantized=prequantized)
        return float(est.bytes), "estimate"
    bits = precision_bits(cfg.precision.name, cfg.precision.bits) or 16
    return cfg.model.params_b * 1e9 * bits / 8, "params x bits (architecture unknown before the first load)"


def serving_shape(cfg: SelectorConfig, tasks: list, encode) -> tuple[int, int]:  # type: ignore[type-arg, no-untyped-def]
    """The largest batch and sequence a variant's serving phase ran: the eval set's longest prompt
    plus its generation budget at engine.batch_size, the throughput and load tests' batches."""
    from selector.tasks import build_prompt, resolve_style

    longest = 0
    for task in tasks:
        style = resolve_style(task, cfg.model.name, cfg.model.prompt_style)
        new = task.max_new_tokens if task.type == "generate" else 1
        longest = max([longest, *(len(encode(build_prompt(task, item, style))) + new for item in task.items)])
    m = cfg.measure
    batch = cfg.engine.batch_size
    if m.throughput.enabled:
        batch = max([batch, *m.throughput.batch_sizes])
        longest = max(longest, m.throughput.prompt_tokens + m.throughput.new_tokens)
    if m.load.enabled:
        batch = max(batch, m.load.max_batch_size, max(m.load.concurrency or [1]))
    return batch, longest


def serving_bytes(cfg: SelectorConfig, device: str, *, batch: int, context: int,
                  runtime_bytes: int | None, copies: int = 1) -> int | None:
    """plan's estimate of a variant's serving peak: its weights, the KV cache and activations at the
    batch and context it ran, and the runtime (in-process: measured before the model loaded; a
    server: its engine's own, selector.engines). copies: servers each holding the weights (vLLM
    instances); the runtime given covers them all."""
    arch = read_arch(cfg.model, Path(cfg.cache_dir).expanduser())
    if arch is None or runtime_bytes is None:
        return None
    weights = estimate_weights(arch, cfg.precision, device.split(":")[0], weights_held(cfg),
                               prequantized=cfg.precision.name in cfg.model.prequantized).bytes
    dtype = cfg.precision.dtype
    return (copies * weights + kv_cache_bytes(arch, batch, context, dtype) + activation_bytes(arch, batch, context, dtype)
            + runtime_bytes)
