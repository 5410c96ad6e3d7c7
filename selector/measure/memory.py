"""Memory: bytes held by the weights, peak process memory (CPU), peak CUDA allocations.

Weight bytes are counted from the tensors themselves rather than with transformers'
`model.get_memory_footprint()`: that sums parameters and buffers at their logical size, so it
counts torchao's int8 weights (tensor subclasses) as bf16 and misses bitsandbytes' scales, which
live beside the parameters (LLM.int8's SCB, NF4's absmax). Both agree everywhere else (native,
gptqmodel, compressed-tensors), which tests/integration/test_precisions_kernels.py checks.
"""

from __future__ import annotations

import resource
import sys
from typing import Any, Iterator

from selector.types import MemoryResult



def weight_bytes(model: Any) -> int:
    """Parameters, buffers and quantization state as stored (packed int4 counts at its real size)."""
    seen: dict[int, Any] = {}  # holding each tensor keeps its id from being reused while we walk
    for t in _weight_tensors(model):
        for leaf in _storage_tensors(t):
            seen.setdefault(id(leaf), leaf)  # tied embeddings are one tensor; bitsandbytes shares some state
    return sum(leaf.numel() * leaf.element_size() for leaf in seen.values())


def _weight_tensors(model: Any) -> Iterator[Any]:
    yield from model.parameters()
    yield from model.buffers()
    for module in model.modules():  # bitsandbytes keeps its scales outside parameters and buffers
        weight = getattr(module, "weight", None)
        state = getattr(weight, "quant_state", None)
        if state is not None:  # NF4: absmax per block (and its own absmax with double quantization)
            yield from (x for x in (getattr(state, "absmax", None), getattr(getattr(state, "state2", None), "absmax", None))
                        if x is not None)
        for holder in (weight, getattr(module, "state", None)):  # LLM.int8: row scales, moved on first forward
            scb = getattr(holder, "SCB", None)
            if scb is not None and hasattr(scb, "element_size"):
                yield scb


def _storage_tensors(t: Any) -> list[Any]:
    """The plain tensors that hold a tensor's data: itself, or a subclass's inner tensors (torchao)."""
    import torch

    data = getattr(t, "data", t)
    if type(data) in (torch.Tensor, torch.nn.Parameter) or not hasattr(data, "__tensor_flatten__"):
        return [t]
    names, _ = data.__tensor_flatten__()
    return [leaf for name in names for leaf in _storage_tensors(getattr(data, name))]


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
