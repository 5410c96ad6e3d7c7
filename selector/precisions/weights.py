"""Building blocks of the weight-memory estimates that each backend gives for itself
(`Backend.estimate_weights`): bytes per tensor the way the loaded model holds it, because
"params x bits" is wrong for small models (embeddings and the LM head stay 16-bit)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from selector.config import PrecisionConfig
from selector.precisions.groups import pick_group_size

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# How an engine holds a variant's weights, as it says of itself (selector.engines.spec.Engine.weights_held);
# the engine is not named here: precisions sit below engines.
IN_PROCESS = "in-process"  # as the precision's own loader holds them in the variant's process (engine=hf)
AS_SAVED = "as-saved"  # the checkpoint as saved, packed where quantized: a server's own kernels run it (engine=vllm)
UNKNOWN = "unknown"  # a server whose layout the harness cannot tell: counted as in-process, said so
HOLDINGS = (IN_PROCESS, AS_SAVED, UNKNOWN)


@dataclass
class WeightEstimate:
    bytes: int
    layout: str  # how the linear weights are held, in words
    notes: list[str] = field(default_factory=list)


def dtype_bytes(precision: PrecisionConfig) -> int:
    return DTYPE_BYTES.get(precision.dtype, 2)


def rest_bytes(arch: Any, precision: PrecisionConfig) -> int:
    """Embeddings, LM head, norms and biases: never quantized by these backends."""
    g = arch.param_groups()
    return (g["embed"] + g["lm_head"] + g["small"]) * dtype_bytes(precision)


def linear_shapes(arch: Any) -> list[tuple[int, int]]:
    """(in_features, out_features) of every quantizable Linear of the model."""
    return [s for _ in range(arch.num_layers) for s in arch.linear_shapes()]


def group_size(arch: Any, requested: int | None) -> int:
    """The group size the backends use: lowered to one that divides every layer (SmolLM2: 128 -> 64)."""
    return pick_group_size((i for i, _ in arch.linear_shapes()), int(requested or 0))


def dense(arch: Any, precision: PrecisionConfig, layout: str, notes: list[str] | None = None) -> WeightEstimate:
    return WeightEstimate(arch.params * dtype_bytes(precision), layout, list(notes or []))


def packed(in_f: int, out_f: int, bits: int, group: int, scale: float, zero: float) -> int:
    groups = math.ceil(in_f / group) if group > 0 else 1  # group <= 0: one scale per output row
    return int(in_f * out_f * bits / 8 + out_f * groups * (scale + zero))


def packed_checkpoint(arch: Any, precision: PrecisionConfig, requested_group: int | None,
                      g_idx: bool, how: str = "packed", zero_points: bool = True) -> WeightEstimate:
    """GPTQ/AWQ layouts: int32-packed weights, fp16 scales and packed zeros per group (none when the
    scheme is symmetric and saves none), and for the GPTQ format an int32 g_idx per input column."""
    method, bits = precision.method, precision.bits or 4
    group = group_size(arch, requested_group)
    per_in = 4 if g_idx else 0
    zero = bits / 8 if zero_points else 0
    linear = sum(packed(i, o, bits, group, scale=2, zero=zero) + per_in * i for i, o in linear_shapes(arch))
    groups = f"group {group}" if group > 0 else "per channel"
    return WeightEstimate(linear + rest_bytes(arch, precision),
                          f"{method} int{bits} {how}, {groups}, lm_head/embeddings 16-bit")


def served(holding: str) -> bool:
    """holding: one of HOLDINGS. True when the checkpoint is held as saved (packed), as a server runs it."""
    return holding == AS_SAVED
