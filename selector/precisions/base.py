"""What a precision backend is: everything the tool knows about one way of holding weights.

A backend is one file (selector/precisions/<name>.py) with one class deriving from `Backend`, and
one registration line in selector/precisions/__init__.py. The class owns:
- `Params`: a dataclass of the `precision.params` it accepts (checked before anything loads,
  without importing its library);
- `calibrates`: whether it quantizes with calibration data (the variant key then covers it);
- `availability(precision, device, capability)`: whether it can run here, and why not;
- `estimate_weights(arch, precision, device, engine, prequantized)`: bytes its weights take;
- `load_base(resolved, precision, ctx)`: quantize (or cast) and load the base model.
What is common to all is done here once: loading a checkpoint that was quantized elsewhere
(`ModelConfig.prequantized`), and recording which kernel ended up running the linear layers.

Each backend imports its library only inside its functions, so configs validate and
`selector list` works without the library installed. A variant that cannot run here is recorded
as skipped with the backend's reason, not as crashed.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

from selector.config import CalibrationConfig, ModelConfig, PrecisionConfig
from selector.precisions.kernels import KernelDecision, cuda_capability
from selector.precisions.params import NoParams, Where, parse_params
from selector.precisions.weights import WeightEstimate
from selector.types import KernelInfo, QuantInfo

INSTALL_HINT = "pip install 'selector[quant]'"


@dataclass
class LoadContext:
    model_cfg: ModelConfig
    device: str  # "cpu" or "cuda:0"
    cache_dir: Path
    calibration: CalibrationConfig
    # Returns the calibration texts (source chosen by config; by default text not in the eval set).
    calibration_texts: Callable[[], list[str]] = lambda: []
    progress: bool = True


@dataclass
class LoadedModel:
    model: Any  # a transformers PreTrainedModel, in eval mode, on ctx.device
    tokenizer: Any
    device: str
    artifact_dir: str | None = None  # checkpoint folder that was loaded (for its size on disk)
    quant: QuantInfo | None = None
    notes: list[str] = field(default_factory=list)
    kernel: KernelInfo | None = None  # what runs the linear layers (filled in by Backend.load)


class Backend:
    """The base of every precision backend. Subclasses set the class attributes and implement
    `load_base` and `estimate_weights`; the rest has working defaults."""

    name: ClassVar[str] = ""  # the registry name, as `backend:` in conf/precision/*.yaml
    library: ClassVar[str | None] = None  # import name that must be installed (checked without importing)
    Params: ClassVar[type] = NoParams
    calibrates: ClassVar[bool] = False  # quantizes with calibration data (GPTQ, AWQ)
    quantizes: ClassVar[bool] = True  # False only for native dtypes (their layers are meant to be plain)

    # ---- params -------------------------------------------------------------------------------
    def params(self, precision: PrecisionConfig, where: Where = Where()) -> Any:
        """The precision's params as this backend's typed dataclass (a ConfigError naming the config
        file, line and field when they are not). `where` only sharpens that message."""
        return parse_params(self.Params, precision, self.name, where)

    def requested_kernel(self, precision: PrecisionConfig) -> str:
        return str(getattr(self.params(precision), "kernel", "auto"))

    # ---- can it run here? ---------------------------------------------------------------------
    def availability(self, precision: PrecisionConfig, device: str,
                     capability: tuple[int, int] | None = None) -> tuple[bool, str]:
        """(True, "") when this precision can run on `device`, else (False, reason).

        capability: the GPU's compute capability; read from the device when None."""
        missing = self.library_missing()
        if missing:
            return False, missing
        why = self.unsupported(precision, device)
        if why:
            return False, why
        if device.startswith("cuda"):
            decision = self.kernel_decision(precision, device, capability or cuda_capability(device))
            if decision is not None and not decision.ok:
                return False, f"no kernel for it on this GPU: {decision.error}"
        return True, ""

    def library_missing(self) -> str:
        if self.library and importlib.util.find_spec(self.library) is None:
            return f"{self.library} is not installed ({INSTALL_HINT})"
        return ""

    def unsupported(self, precision: PrecisionConfig, device: str) -> str:
        """Why this method/bits/dtype cannot run on `device` ("" when it can)."""
        return ""

    def kernel_decision(self, precision: PrecisionConfig, device: str,
                        capability: tuple[int, int] | None) -> KernelDecision | None:
        """The kernel rule for this precision (selector.precisions.kernels), None when the backend
        has no choice of kernel."""
        return None

    # ---- memory -------------------------------------------------------------------------------
    def estimate_weights(self, arch: Any, precision: PrecisionConfig, device: str, engine: str = "hf",
                         prequantized: bool = False) -> WeightEstimate:
        """Bytes the loaded weights occupy on `device` ("cpu"/"cuda") when `engine` runs them."""
        raise NotImplementedError

    # ---- loading ------------------------------------------------------------------------------
    def load(self, resolved: Any, precision: PrecisionConfig, ctx: LoadContext) -> LoadedModel:
        """Load the resolved model at this precision, and record which kernel runs it."""
        if getattr(resolved, "prequantized", False):  # quantized elsewhere: the same for every backend
            from selector.precisions.prequantized import load_prequantized

            loaded = load_prequantized(resolved, precision, ctx, self.name, self.requested_kernel(precision))
        else:
            loaded = self.load_base(resolved, precision, ctx)
        if loaded.kernel is None:
            from selector.precisions.kernel_info import inspect_kernel

            loaded.kernel = inspect_kernel(loaded.model, backend=self.name, kernel=self.kernel_name(precision),
                                           quantized=self.quantizes)
        return loaded

    def load_base(self, resolved: Any, precision: PrecisionConfig, ctx: LoadContext) -> LoadedModel:
        """Quantize (or cast) the resolved base model and load it."""
        raise NotImplementedError

    def kernel_name(self, precision: PrecisionConfig) -> str:
        """A short name for the kernel this backend runs when it has no choice of kernel."""
        return f"{self.name}-{precision.method}" if precision.method else self.name


def torch_dtype(name: str) -> Any:
    import torch

    try:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}: use float32, bfloat16 or float16") from None


def load_tokenizer(resolved: Any) -> Any:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolved.path, **resolved.load_kwargs())
    if tok.pad_token is None:  # batched generation needs one; eos is the usual stand-in
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def config_kwargs(resolved: Any) -> dict[str, Any]:
    """The subset of `resolved.load_kwargs()` that AutoConfig understands (others become attributes)."""
    keep = ("revision", "trust_remote_code", "local_files_only")
    return {k: v for k, v in resolved.load_kwargs().items() if k in keep}


def dir_bytes(path: str | Path | None) -> int | None:
    if not path or not Path(path).is_dir():
        return None
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())
