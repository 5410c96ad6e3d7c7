"""torchao 0.18 through transformers' TorchAoConfig, quantized at load time (no calibration).

Methods:
- `int8_weight_only`: int8 weights, per-row scales, bf16 activations (runs on CPU and CUDA);
- `int8_dynamic`: int8 weights and dynamically quantized int8 activations (CPU and CUDA);
- `int4_weight_only`: int4 weights; its packed layouts need CUDA (or the optional `mslk`
  kernels), so on CPU the backend says so up front and the variant is recorded as skipped.
Quantizing at load takes seconds, so nothing is cached.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from selector.config import PrecisionConfig
from selector.precisions.base import (
    LoadContext,
    LoadedModel,
    load_tokenizer,
    torch_dtype,
)
from selector.precisions.prequantized import load_prequantized
from selector.types import QuantInfo

METHODS = ("int8_weight_only", "int8_dynamic", "int4_weight_only")
CUDA_ONLY = {"int4_weight_only": "torchao int4 weight-only packs weights for CUDA kernels (no CPU kernel without mslk)"}


class TorchAoBackend:
    def availability(self, precision: PrecisionConfig, device: str) -> tuple[bool, str]:
        if importlib.util.find_spec("torchao") is None:
            return False, "torchao is not installed (pip install 'selector[quant]')"
        if precision.method not in METHODS:
            return False, f"torchao method {precision.method!r} is not one of {', '.join(METHODS)}"
        if precision.method in CUDA_ONLY and not device.startswith("cuda"):
            return False, CUDA_ONLY[precision.method]
        return True, ""

    def load(self, resolved: Any, precision: PrecisionConfig, ctx: LoadContext) -> LoadedModel:
        if getattr(resolved, "prequantized", False):
            return load_prequantized(resolved, precision, ctx)
        import torchao
        from transformers import AutoModelForCausalLM, TorchAoConfig

        quant_type = quant_config(str(precision.method), precision.params)
        model = AutoModelForCausalLM.from_pretrained(
            resolved.path,
            dtype=torch_dtype(precision.dtype),
            device_map=ctx.device,
            quantization_config=TorchAoConfig(quant_type=quant_type),
            **resolved.load_kwargs(),
        )
        model.eval()
        quant = QuantInfo(
            method=str(precision.method),
            library="torchao",
            library_version=torchao.__version__,
            params={"bits": precision.bits, "quant_type": type(quant_type).__name__, **precision.params},
        )
        return LoadedModel(model, load_tokenizer(resolved), ctx.device, None, quant)


def quant_config(method: str, params: dict[str, Any]) -> Any:
    from torchao.quantization import (
        Int4WeightOnlyConfig,
        Int8DynamicActivationInt8WeightConfig,
        Int8WeightOnlyConfig,
    )

    if method == "int8_weight_only":
        return Int8WeightOnlyConfig(**params)
    if method == "int8_dynamic":
        return Int8DynamicActivationInt8WeightConfig(**params)
    return Int4WeightOnlyConfig(group_size=params.get("group_size", 128))
