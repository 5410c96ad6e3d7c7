"""torchao 0.18 through transformers' TorchAoConfig, quantized at load time (no calibration).

Methods:
- `int8_weight_only`: int8 weights, per-row scales, bf16 activations (runs on CPU and CUDA);
- `int8_dynamic`: int8 weights and dynamically quantized int8 activations (CPU and CUDA);
- `int4_weight_only`: int4 weights; its packed layouts need CUDA (or the optional `mslk`
  kernels), so on CPU the backend says so up front and the variant is recorded as skipped.
Quantizing at load takes seconds, so nothing is cached. The weights are torchao tensor subclasses
inside plain torch.nn.Linear modules (KernelInfo.weight_class names them); they stay int8 / packed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from selector.config import PrecisionConfig
from selector.precisions import weights
from selector.precisions.base import Backend, LoadContext, LoadedModel, load_tokenizer, torch_dtype
from selector.precisions.params import set_fields
from selector.records import QuantInfo

METHODS = ("int8_weight_only", "int8_dynamic", "int4_weight_only")
CUDA_ONLY = {"int4_weight_only": "torchao int4 weight-only packs weights for CUDA kernels (no CPU kernel without mslk)"}


@dataclass(frozen=True)
class TorchAoParams:
    group_size: int | None = None  # int4: 128 when unset; int8: per-row scales when unset
    set_inductor_config: bool | None = None


class TorchAoBackend(Backend):
    name = "torchao"
    library = "torchao"
    Params = TorchAoParams

    def unsupported(self, precision: PrecisionConfig, device: str) -> str:
        if precision.method not in METHODS:
            return f"torchao method {precision.method!r} is not one of {', '.join(METHODS)}"
        if precision.method in CUDA_ONLY and not device.startswith("cuda"):
            return CUDA_ONLY[precision.method]
        return ""

    def kernel_name(self, precision: PrecisionConfig) -> str:
        return f"torchao-{precision.method}"

    def estimate_weights(self, arch: Any, precision: PrecisionConfig, device: str, holding: str = "in-process",
                         prequantized: bool = False) -> weights.WeightEstimate:
        rest, shapes = weights.rest_bytes(arch, precision), weights.linear_shapes(arch)
        bits = precision.bits or 16
        if bits >= 8:
            # int8 data, and per output row an fp32 scale and an int8 zero point (measured: Int8Tensor).
            return weights.WeightEstimate(sum(i * o + 5 * o for i, o in shapes) + rest, "int8 weight-only, per-row scales")
        group = weights.group_size(arch, self.params(precision).group_size or 128)
        linear = sum(weights.packed(i, o, bits, group, scale=2, zero=2) for i, o in shapes)
        return weights.WeightEstimate(linear + rest, f"int{bits} weight-only, group {group}")

    def load_base(self, resolved: Any, precision: PrecisionConfig, ctx: LoadContext) -> LoadedModel:
        import torchao
        from transformers import AutoModelForCausalLM, TorchAoConfig

        params = set_fields(self.params(precision))
        quant_type = quant_config(str(precision.method), params)
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
            params={"bits": precision.bits, "quant_type": type(quant_type).__name__, **params},
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
        return Int8DynamicActivationInt8WeightConfig(**{k: v for k, v in params.items() if k != "group_size"})
    return Int4WeightOnlyConfig(**{"group_size": 128, **params})
