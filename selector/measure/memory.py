"""Memory: bytes held by the weights, peak process memory (CPU), peak CUDA allocations."""

from __future__ import annotations

import resource
import sys
from typing import Any

from selector.types import MemoryResult


def weight_bytes(model: Any) -> int:
    """Parameters and buffers as stored (packed int4 buffers count at their real size)."""
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        if id(t) in seen:  # tied embeddings are one tensor
            continue
        seen.add(id(t))
        total += t.numel() * t.element_size()
    return total


def peak_rss_bytes() -> int:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024  # Linux reports KiB


def reset_cuda_peak() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def measure_memory(model: Any, device: str, artifact_bytes: int | None) -> MemoryResult:
    import torch

    cuda = device.startswith("cuda") and torch.cuda.is_available()
    return MemoryResult(
        weight_bytes=weight_bytes(model),
        peak_rss_bytes=peak_rss_bytes(),
        cuda_max_allocated_bytes=torch.cuda.max_memory_allocated() if cuda else None,
        cuda_max_reserved_bytes=torch.cuda.max_memory_reserved() if cuda else None,
        artifact_bytes=artifact_bytes,
    )


def first_linear(model: Any) -> dict[str, Any] | None:
    """The first linear layer of the decoder (not the head): its module path, class and weight storage.

    A quantized checkpoint that loaded packed shows its library's class (Linear8bitLt,
    CompressedLinear, a gptqmodel QuantLinear, ...) with integer storage; one that was unpacked to
    the compute dtype shows a 16- or 32-bit float weight."""
    for name, module in model.named_modules():
        if "linear" not in type(module).__name__.lower() or name.endswith("lm_head"):
            continue
        tensors = dict(module.named_parameters(recurse=False)) | dict(module.named_buffers(recurse=False))
        matrices = {k: v for k, v in tensors.items() if v.dim() >= 2}
        if not matrices:
            continue
        # The weight is its largest matrix (scales and zero points are smaller): packed when that
        # is stored in fewer than 16 bits or as integers (int32 words holding eight int4 values).
        weight = max(matrices.values(), key=lambda t: t.numel())
        packed = not (weight.is_floating_point() and weight.element_size() >= 2)
        return {"module": name, "class": type(module).__name__, "class_module": type(module).__module__,
                "storage": {k: str(v.dtype).replace("torch.", "") for k, v in matrices.items()}, "packed": packed}
    return None
