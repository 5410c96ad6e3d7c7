"""What a precision backend is: everything the tool knows about one way of holding weights.

A backend is one file (selector/precisions/<name>.py) with one class deriving from `Backend`, and
one registration line in selector/precisions/__init__.py. The class owns:
- `Params`: a dataclass of the `precision.params` it accepts (checked before anything loads,
  without importing its library);
- `calibrates`: whether it quantizes with calibration data (the variant key then covers it);
- `availability(precision, device, capability, load_library)`: whether it can run here, and why not;
- `estimate_weights(arch, precision, device, holding, prequantized)`: bytes its weights take;
- `load_base(resolved, precision, ctx)`: quantize (or cast) and load the base model.
What is common to all is done here once: loading a checkpoint that was quantized elsewhere
(`ModelConfig.prequantized`), and recording which kernel ended up running the linear layers.

Each backend imports its library only inside its functions, so configs validate and
`selector list` works without the library installed. A variant that cannot run here is recorded
as skipped with the backend's reason, not as crashed.
"""

from __future__ import annotations

import importlib.util
from typing import Any, ClassVar

from selector.config import PrecisionConfig
from selector.precisions.kernels import KernelDecision, cuda_capability
from selector.precisions.loading import (  # noqa: F401 (re-exported: backends import them from here)
    LoadContext,
    LoadedModel,
    config_kwargs,
    dir_bytes,
    load_tokenizer,
    torch_dtype,
)
from selector.origin import Origin
from selector.precisions.params import NoParams, parse_params
from selector.precisions.weights import WeightEstimate

INSTALL_HINT = "pip install 'selector[quant]'"


class Backend:
    """The base of every precision backend. Subclasses set the class attributes and implement
    `load_base` and `estimate_weights`; the rest has working defaults."""

    name: ClassVar[str] = ""  # the registry name, as `backend:` in conf/precision/*.yaml
    library: ClassVar[str | None] = None  # import name that must be installed (checked without importing)
    Params: ClassVar[type] = NoParams
    calibrates: ClassVar[bool] = False  # quantizes with calibration data (GPTQ, AWQ)
    quantizes: ClassVar[bool] = True  # False only for native dtypes (their layers are meant to be plain)
    builds_artifact: ClassVar[bool] = False  # quantizes once into the cache (then loads that checkpoint)

    # ---- params -------------------------------------------------------------------------------
    def params(self, precision: PrecisionConfig, origin: Origin = Origin()) -> Any:
        """The precision's params as this backend's typed dataclass (a ConfigError naming the config
        file, line and field when they are not). `origin` only sharpens that message."""
        return parse_params(self.Params, precision, self.name, origin)

    def requested_kernel(self, precision: PrecisionConfig) -> str:
        return str(getattr(self.params(precision), "kernel", "auto"))

    # ---- can it run here? ---------------------------------------------------------------------
    def availability(self, precision: PrecisionConfig, device: str, capability: tuple[int, int] | None = None,
                     load_library: bool = True) -> tuple[bool, str]:
        """(True, "") when this precision can run on `device`, else (False, reason).

        capability: the GPU's compute capability; read from the device when None.
        load_library: False where nothing will load a model (the sweep's own process): a library
        that is installed counts as there, without importing it (seconds, and torch with it); the
        variant's process asks again with True and records a library that does not import."""
        missing = self.library_missing(load_library)
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

    def library_missing(self, load: bool = True) -> str:
        """Why the backend's library cannot be used here ("" when it can); `load`: import it to
        be sure, where a backend's library can be installed and still fail to import."""
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
    def estimate_weights(self, arch: Any, precision: PrecisionConfig, device: str, holding: str = "in-process",
                         prequantized: bool = False) -> WeightEstimate:
        """Bytes the loaded weights occupy on `device` ("cpu"/"cuda") held as `holding` says
        (selector.precisions.weights.HOLDINGS: what the engine says of itself, Engine.weights_held)."""
        raise NotImplementedError

    # ---- loading ------------------------------------------------------------------------------
    def load(self, resolved: Any, precision: PrecisionConfig, ctx: LoadContext) -> LoadedModel:
        """Load the resolved model at this precision, and record which kernel runs it."""
        if getattr(resolved, "prequantized", False):  # quantized elsewhere: the same for every backend
            from selector.precisions.prequantized import load_prequantized

            loaded = load_prequantized(resolved, precision, ctx, self.name, self.requested_kernel(precision))
        else:
            loaded = self.load_base(resolved, precision, ctx)
        if loaded.kernel is None and loaded.model is not None:  # no model: only prepared (ctx.prepare_only)
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
