"""bitsandbytes: LLM.int8 (`method: int8`) and 4-bit NF4 (`method: nf4`), quantized at load time.

Both quantize while loading, so there is no artifact to cache. NF4 has a CPU pitfall
(docs/precisions.md, CPU pitfalls): on AVX512-BF16 CPUs the first forward pass repacks the weights
and a state_dict saved afterwards carries a wrong absmax; we never save NF4 weights, we re-quantize
at load.
bitsandbytes runs its own kernels on CPU and CUDA; the weights stay int8 / packed 4-bit on both.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

from selector.config import PrecisionConfig
from selector.precisions import weights
from selector.precisions.base import Backend, LoadContext, LoadedModel, load_tokenizer, torch_dtype
from selector.precisions.params import set_fields
from selector.records import QuantInfo

METHODS = ("int8", "nf4")


@dataclass(frozen=True)
class BnbParams:
    """Passed on to transformers' BitsAndBytesConfig when set."""

    llm_int8_threshold: float | None = None  # int8: outlier threshold (6.0 by default)
    llm_int8_skip_modules: list[str] | None = None  # modules left unquantized
    bnb_4bit_use_double_quant: bool | None = None  # nf4: quantize the absmax scales too


class BnbBackend(Backend):
    name = "bnb"
    library = "bitsandbytes"
    Params = BnbParams

    def library_missing(self, load: bool = True) -> str:
        if not load:
            return super().library_missing(load)
        try:
            import bitsandbytes  # noqa: F401
        except Exception as e:  # ImportError, or a broken native library
            return f"bitsandbytes does not import: {e}"
        return ""

    def unsupported(self, precision: PrecisionConfig, device: str) -> str:
        if precision.method not in METHODS:
            return f"bitsandbytes method {precision.method!r} is not int8 or nf4"
        return ""

    def kernel_name(self, precision: PrecisionConfig) -> str:
        return f"bitsandbytes-{precision.method}"

    def estimate_weights(self, arch: Any, precision: PrecisionConfig, device: str, holding: str = "in-process",
                         prequantized: bool = False) -> weights.WeightEstimate:
        rest, shapes = weights.rest_bytes(arch, precision), weights.linear_shapes(arch)
        if precision.method == "int8":
            # int8 weights; per-row fp32 scales (SCB) beside them; lm_head stays 16-bit.
            linear = sum(i * o + 4 * o for i, o in shapes)
            return weights.WeightEstimate(linear + rest, "int8 (LLM.int8), lm_head/embeddings 16-bit")
        linear = sum(i * o // 2 + 4 * math.ceil(i * o / 64) for i, o in shapes)  # absmax per 64 weights
        return weights.WeightEstimate(linear + rest, "nf4 (block 64, fp32 absmax), lm_head/embeddings 16-bit")

    def load_base(self, resolved: Any, precision: PrecisionConfig, ctx: LoadContext) -> LoadedModel:
        import bitsandbytes
        from transformers import AutoModelForCausalLM, BitsAndBytesConfig

        dtype = torch_dtype(precision.dtype)
        extra = set_fields(self.params(precision))
        if precision.method == "int8":
            qcfg = BitsAndBytesConfig(load_in_8bit=True, **extra)
        else:
            qcfg = BitsAndBytesConfig(
                load_in_4bit=True,
                bnb_4bit_quant_type="nf4",
                bnb_4bit_compute_dtype=dtype,
                **extra,
            )
        # LLM.int8 casts activations to fp16 for its matmul and says so on every call.
        warnings.filterwarnings("ignore", message=".*inputs will be cast from.*")
        model = AutoModelForCausalLM.from_pretrained(
            resolved.path,
            quantization_config=qcfg,
            dtype=dtype,
            device_map=ctx.device,
            **resolved.load_kwargs(),
        )
        model.eval()
        quant = QuantInfo(
            method=str(precision.method),
            library="bitsandbytes",
            library_version=bitsandbytes.__version__,
            params=qcfg.to_dict(),
        )
        return LoadedModel(model, load_tokenizer(resolved), ctx.device, None, quant)
