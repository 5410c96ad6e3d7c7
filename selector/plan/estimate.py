"""Memory a variant needs, estimated from its architecture alone.

Weight memory is counted per tensor the way each precision backend stores it (packed int4 + group
scales/zeros, int8 + 16-bit outlier path, embeddings and lm_head left in 16 bit), because "params
x bits" is wrong for small models. The KV cache is sized at a batch and context; activations and
a fixed reserve are rough allowances, stated as such.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from selector.config import PrecisionConfig, SelectorConfig
from selector.plan.arch import ArchFacts, read_arch
from selector.precisions.groups import pick_group_size

GIB = 2**30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass
class WeightEstimate:
    bytes: int
    layout: str  # how the linear weights are held, in words
    notes: list[str] = field(default_factory=list)


def estimate_weights(arch: ArchFacts, precision: PrecisionConfig, device: str, prequantized: bool = False) -> WeightEstimate:
    """Bytes the loaded weights occupy on `device` ("cpu" or "cuda") at this precision."""
    g = arch.param_groups()
    dtype = DTYPE_BYTES.get(precision.dtype, 2)
    rest = (g["embed"] + g["lm_head"] + g["small"]) * dtype  # never quantized by these backends
    shapes = [s for _ in range(arch.num_layers) for s in arch.linear_shapes()]
    backend, method, bits = precision.backend, precision.method, precision.bits or 16
    # Backends lower the group size to one that divides every layer's width (SmolLM2: 128 -> 64).
    group = pick_group_size((i for i, _ in arch.linear_shapes()), int(precision.params.get("group_size", 128) or 0))
    if backend == "native":
        return WeightEstimate(arch.params * dtype, f"{precision.dtype}")
    if backend == "bnb" and method == "int8":
        # int8 weights; per-row fp32 scales (SCB) live beside them; lm_head stays 16-bit.
        linear = sum(i * o + 4 * o for i, o in shapes)
        return WeightEstimate(linear + rest, "int8 (LLM.int8), lm_head/embeddings 16-bit",
                              ["bitsandbytes keeps row scales outside parameters: measured bytes miss them"])
    if backend == "bnb" and method == "nf4":
        linear = sum(i * o // 2 + 4 * math.ceil(i * o / 64) for i, o in shapes)  # absmax per 64 weights
        return WeightEstimate(linear + rest, "nf4 (block 64, fp32 absmax), lm_head/embeddings 16-bit")
    if backend == "torchao":
        if bits >= 8:
            return WeightEstimate(sum(i * o + 2 * o for i, o in shapes) + rest, "int8 weight-only, per-row scales")
        return WeightEstimate(sum(_packed(i, o, bits, group, scale=2, zero=2) for i, o in shapes) + rest,
                              f"int{bits} weight-only, group {group}")
    packed_here = backend == "gptqmodel" or prequantized or device.startswith("cuda")
    if backend in ("gptqmodel", "llmcompressor") and packed_here:
        # GPTQ/AWQ formats: int32-packed weights, fp16 scales and packed zeros per group (+ g_idx for GPTQ).
        gidx = 4 if method == "gptq" and (backend == "gptqmodel" or prequantized) else 0
        linear = sum(_packed(i, o, bits, group, scale=2, zero=bits / 8) + gidx * i for i, o in shapes)
        return WeightEstimate(linear + rest, f"{method} int{bits} packed, group {group}, lm_head/embeddings 16-bit")
    if backend == "llmcompressor":
        # transformers unpacks compressed-tensors checkpoints to the load dtype on CPU (docs/precisions.md).
        return WeightEstimate(arch.params * dtype, f"{precision.dtype} (compressed-tensors unpacked on CPU)",
                              ["on a GPU the same checkpoint stays packed"])
    return WeightEstimate(arch.params * dtype, f"{precision.dtype} (unknown backend {backend!r}: unquantized)")


def _packed(in_f: int, out_f: int, bits: int, group: int, scale: float, zero: float) -> int:
    groups = math.ceil(in_f / group) if group > 0 else 1  # group <= 0: one scale per output row
    return int(in_f * out_f * bits / 8 + out_f * groups * (scale + zero))


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
    est = estimate_weights(arch, cfg.precision, device, prequantized=cfg.precision.name in cfg.model.prequantized)
    kv = kv_cache_bytes(arch, batch, context, cfg.precision.dtype)
    act = activation_bytes(arch, batch, context, cfg.precision.dtype)
    total = est.bytes + kv + act + int(reserve_gib * GIB)
    fits = None if gpu_gib is None else total <= gpu_gib * GIB
    return PlanRow(name, arch.params, est.bytes, kv, act, total, fits, est.layout, arch.source, est.notes)
