"""Memory: bytes held by the weights, and the peak memory of each phase of a variant's life.

A variant's worker goes through three phases, and each has its own peak (docs/memory.md):
preparing the artifact (converting, quantizing, the fidelity reference: in a process of its own,
see variant/prepare.py), loading it, and serving it (evaluation, latency, load tests). `PhaseMeter`
measures one phase of this process: Linux resets the resident set's high-water mark (VmHWM) when
"5" is written to /proc/self/clear_refs, and torch resets its CUDA peak counters. Where VmHWM
cannot be reset (not Linux), a phase has no RSS figure of its own and the whole process's peak is
what is left.

Weight bytes are counted from the tensors themselves rather than with transformers'
`model.get_memory_footprint()`: that sums parameters and buffers at their logical size, so it
counts torchao's int8 weights (tensor subclasses) as bf16 and misses bitsandbytes' scales, which
live beside the parameters (LLM.int8's SCB, NF4's absmax). Both agree everywhere else (native,
gptqmodel, compressed-tensors), which tests/integration/test_precisions_kernels.py checks.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import re
import resource
import sys
from pathlib import Path
from typing import Any, Iterator

from selector.records import MemoryResult, PeakMemory

STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")


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


def _status_kib(field: str, status: Path = STATUS) -> int | None:
    try:
        match = re.search(rf"^{field}:\s+(\d+) kB", status.read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) if match else None


def current_rss_bytes() -> int | None:
    kib = _status_kib("VmRSS")
    return kib * 1024 if kib is not None else None


def release_freed_memory() -> None:
    """Hand memory that is free inside the process back to the system before a phase starts: what
    Python's collector can free, then glibc's malloc_trim (freed heap it keeps for reuse would
    otherwise count in the next phase's resident set)."""
    gc.collect()
    libc_name = ctypes.util.find_library("c")
    if sys.platform.startswith("linux") and libc_name:
        try:
            ctypes.CDLL(libc_name).malloc_trim(0)
        except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
            pass
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass


class PhaseMeter:
    """The peak memory of one phase of this process: `start()` at its beginning, `read()` at its end."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.resettable = False

    def start(self) -> None:
        release_freed_memory()
        try:
            CLEAR_REFS.write_text("5")  # resets VmHWM to the current resident set (Linux >= 4.0)
            self.resettable = _status_kib("VmHWM") is not None
        except OSError:
            self.resettable = False
        reset_cuda_peak()

    def read(self) -> PeakMemory:
        hwm = _status_kib("VmHWM") if self.resettable else None
        allocated, reserved = _cuda_peaks(self.device)
        return PeakMemory(rss_bytes=hwm * 1024 if hwm is not None else None,
                          cuda_allocated_bytes=allocated, cuda_reserved_bytes=reserved)


def higher(a: PeakMemory | None, b: PeakMemory | None) -> PeakMemory | None:
    """The field-by-field maximum of two peaks (None where neither has a figure)."""
    if a is None or b is None:
        return a or b

    def top(x: int | None, y: int | None) -> int | None:
        return y if x is None else x if y is None else max(x, y)

    return PeakMemory(rss_bytes=top(a.rss_bytes, b.rss_bytes),
                      cuda_allocated_bytes=top(a.cuda_allocated_bytes, b.cuda_allocated_bytes),
                      cuda_reserved_bytes=top(a.cuda_reserved_bytes, b.cuda_reserved_bytes))


def _cuda_peaks(device: str) -> tuple[int | None, int | None]:
    import torch

    if not (device.startswith("cuda") and torch.cuda.is_available()):
        return None, None
    return torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()


def measure_memory(model: Any, device: str, artifact_bytes: int | None, *, serving: PeakMemory | None = None,
                   load: PeakMemory | None = None, prepare: PeakMemory | None = None,
                   runtime_rss_bytes: int | None = None) -> MemoryResult:
    """What the loaded model weighs, its phases' peaks (measured by the caller), and the process's whole peak."""
    import torch

    cuda = device.startswith("cuda") and torch.cuda.is_available()
    return MemoryResult(
        weight_bytes=weight_bytes(model),
        serving=serving,
        load=load,
        prepare=prepare,
        runtime_rss_bytes=runtime_rss_bytes,
        peak_rss_bytes=peak_rss_bytes(),
        # whole-process CUDA peaks: the larger of the phases this process measured
        cuda_max_allocated_bytes=_max(p.cuda_allocated_bytes for p in (serving, load) if p) if cuda else None,
        cuda_max_reserved_bytes=_max(p.cuda_reserved_bytes for p in (serving, load) if p) if cuda else None,
        artifact_bytes=artifact_bytes,
    )


def _max(values: Iterator[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


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
