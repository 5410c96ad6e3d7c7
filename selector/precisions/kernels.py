"""Which kernel runs a GPTQ / AWQ / compressed-tensors checkpoint in-process, and why.

A precision's `kernel` param asks for one (`auto` by default). The rule is a pure function of the
checkpoint format, its quantization (bits, group size, symmetry), the compute dtype, the device and
the GPU's compute capability, so it can be checked without a GPU:

- on CUDA, `auto` walks a fallback order and takes the first kernel this GPU can run, recording why
  each one before it was passed over; a named kernel is taken or the variant is skipped with the
  reason. Nothing ever falls back silently to unpacked weights.
- on CPU, `auto` leaves the choice to gptqmodel (its CPU kernels keep the weights packed), except
  for compressed-tensors checkpoints, which transformers decompresses to the load dtype (`dense`).

compressed-tensors: transformers 5.17 has no packed int4 path for these checkpoints (its
`CompressedLinear` was removed in compressed-tensors 0.19; `run_compressed`/`dequantize=False` only
defers decompression to the first forward pass). To keep them packed they are converted, losslessly,
to the GPTQ v2 format (selector/precisions/convert.py) and run by gptqmodel's GPTQ kernels.

Requirements are gptqmodel 7.6's own (its QuantLinear classes' SUPPORTS_* and capability checks);
gptqmodel validates the chosen kernel again on the real device before anything loads.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Callable

ANY_GROUP = (-1, 16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True)
class Kernel:
    name: str  # what a precision's `kernel` param names
    library_backend: str  # gptqmodel's BACKEND value ("" for transformers' own dense path)
    cuda_only: bool = True
    min_capability: tuple[int, int] | None = None
    fp16_min_capability: tuple[int, int] | None = None  # a lower bar when the compute dtype is float16
    bits: tuple[int, ...] = (4,)
    group_sizes: tuple[int, ...] = (-1, 32, 64, 128)
    sym_only: bool = False
    dtypes: tuple[str, ...] = ("float16", "bfloat16")
    needs: str | None = None  # a module that must import (triton)
    packed: bool = True

    def refusal(self, *, bits: int, group_size: int, sym: bool, dtype: str, device: str,
                capability: tuple[int, int] | None, importable: Callable[[str], bool]) -> str:
        """Why this kernel cannot run this checkpoint here ("" when it can)."""
        if self.cuda_only and not device.startswith("cuda"):
            return "needs a CUDA GPU"
        if bits not in self.bits:
            return f"supports {'/'.join(map(str, self.bits))}-bit weights, not {bits}-bit"
        if group_size not in self.group_sizes:
            return f"supports group sizes {', '.join(map(str, self.group_sizes))}, not {group_size}"
        if self.sym_only and not sym:
            return "needs symmetric weights (no zero points)"
        if dtype not in self.dtypes:
            return f"runs in {' or '.join(self.dtypes)}, not {dtype}"
        if self.needs and not importable(self.needs):
            return f"needs {self.needs}, which is not installed"
        floor = self.fp16_min_capability if dtype == "float16" and self.fp16_min_capability else self.min_capability
        if floor and capability is not None and tuple(capability) < floor:
            return (f"needs compute capability {floor[0]}.{floor[1]}+ for {dtype} "
                    f"(this GPU: {capability[0]}.{capability[1]})")
        return ""


DENSE = Kernel("dense", "", cuda_only=False, bits=(2, 3, 4, 8), group_sizes=ANY_GROUP,
               dtypes=("float32", "float16", "bfloat16"), packed=False)
GPTQ_TORCH = Kernel("torch", "gptq_torch", cuda_only=False, bits=(2, 3, 4, 5, 6, 7, 8), group_sizes=ANY_GROUP)
ORDER: dict[str, tuple[Kernel, ...]] = {
    "gptq": (
        Kernel("marlin", "gptq_marlin", min_capability=(8, 0), fp16_min_capability=(7, 5), bits=(4, 8), sym_only=True),
        Kernel("exllama", "gptq_exllama_v2"),
        Kernel("triton", "gptq_triton", bits=(2, 4, 8), group_sizes=ANY_GROUP, needs="triton"),
        GPTQ_TORCH,
    ),
    "awq": (
        Kernel("marlin", "awq_marlin", min_capability=(8, 0), bits=(4, 8)),
        Kernel("exllama", "awq_exllama_v2"),
        Kernel("gemm", "awq_gemm", group_sizes=(-1, 16, 32, 64, 128)),
        Kernel("triton", "awq_gemm_triton", dtypes=("float16",), needs="triton"),
        Kernel("torch", "awq_torch", cuda_only=False, bits=(2, 3, 4, 5, 6, 7, 8), group_sizes=(-1, 16, 32, 64, 128)),
    ),
}
# compressed-tensors: converted to GPTQ v2 and run by a GPTQ kernel; transformers' dense path last.
ORDER["compressed-tensors"] = (*ORDER["gptq"], DENSE)


@dataclass
class KernelDecision:
    """The kernels to try, in order, and what was passed over on the way."""

    fmt: str
    requested: str
    candidates: list[Kernel] = field(default_factory=list)
    passed_over: list[str] = field(default_factory=list)  # "marlin: needs compute capability 8.0+ ..."
    library_auto: bool = False  # CPU auto for GPTQ/AWQ: gptqmodel picks its CPU kernel (packed)
    error: str = ""  # nothing can run: why

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def packed(self) -> bool:
        """Whether the first choice keeps the weights packed."""
        return self.library_auto or bool(self.candidates and self.candidates[0].packed)


def choose(fmt: str, requested: str, *, bits: int, group_size: int, sym: bool, dtype: str, device: str,
           capability: tuple[int, int] | None = None,
           importable: Callable[[str], bool] | None = None) -> KernelDecision:
    """The kernel rule. capability: the GPU's (major, minor), None when unknown (then not checked)."""
    importable = importable or _importable
    decision = KernelDecision(fmt, requested)
    if fmt not in ORDER:
        decision.error = f"no kernel choice for checkpoint format {fmt!r}"
        return decision
    order = ORDER[fmt]
    names = [k.name for k in order]
    on_cuda = device.startswith("cuda")
    if requested not in ("auto", *names):
        decision.error = f"kernel {requested!r} does not run {fmt} checkpoints (choose auto, {', '.join(names)})"
        return decision
    if requested == "auto" and not on_cuda:
        if fmt == "compressed-tensors":  # as before: transformers decompresses them on CPU
            decision.candidates = [DENSE]
        else:
            decision.library_auto = True
        return decision
    wanted = order if requested == "auto" else [k for k in order if k.name == requested]
    for kernel in wanted:
        why = kernel.refusal(bits=bits, group_size=group_size, sym=sym, dtype=dtype, device=device,
                             capability=capability, importable=importable)
        if why:
            decision.passed_over.append(f"{kernel.name}: {why}")
        else:
            decision.candidates.append(kernel)
    if not decision.candidates:
        decision.error = "; ".join(decision.passed_over)
    return decision


def cuda_capability(device: str) -> tuple[int, int] | None:
    """(major, minor) of the GPU `device` names, None on CPU or when CUDA is not available."""
    if not device.startswith("cuda"):
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    index = int(device.split(":")[1]) if ":" in device else torch.cuda.current_device()
    return tuple(torch.cuda.get_device_capability(index))  # type: ignore[return-value]


def _importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None
