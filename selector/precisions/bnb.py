"""bitsandbytes: LLM.int8 (`method: int8`) and 4-bit NF4 (`method: nf4`), quantized at load time.

Both quantize while loading, so there is no artifact to cache. NF4 has a CPU pitfall
(docs/precisions.md, CPU pitfalls): on AVX512-BF16 CPUs the first forward pass repacks the weights
and a state_dict saved afterwards carries a wrong absmax; we never save NF4 weights, we re-quantize
at load.
"""

from __future__ import annotations

import warnings
from typing import Any

from selector.config import PrecisionConfig
from selector.precisions.base import LoadContext, LoadedModel, load_tokenizer, torch_dtype
from selector.types import QuantInfo


class BnbBackend:
    def availability(self, precision: PrecisionConfig, device: str) -> tuple[bool, str]:
        try:
            import bitsandbytes  # noqa: F401
        except Exception as e:  # ImportError, or a broken native library
            return False, f"bitsandbytes does not import: {e}"
        if precision.method not in ("int8", "nf4"):
            return False, f"bitsandbytes method {precision.method!r} is not int8 or nf4"
        return True, ""

    def load(self, resolved: Any, precision: PrecisionConfig, ctx: LoadContext) -> LoadedModel:
        if getattr(resolved, "prequantized", False):  # a checkpoint saved already quantized
            from selector.precisions.prequantized import load_prequantized

            return load_prequantized(resolved, precision, ctx)
        import bitsandbytes
        from transformers import AutoModelForCausalLM, BitsAndBytesConfig

        dtype = torch_dtype(precision.dtype)
        if precision.method == "int8":
            qcfg = BitsAndBytesConfig(load_in_8bit=True, **precision.params)
        else:
            qcfg = BitsAndBytesConfig(
                load_in_4bit=True,
                bnb_4bit_quant_type="nf4",
                bnb_4bit_compute_dtype=dtype,
                **precision.params,
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
