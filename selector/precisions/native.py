"""Native dtypes (fp32, bf16, fp16): load the weights as they are, cast to the dtype."""

from __future__ import annotations

from typing import Any

from selector.config import PrecisionConfig
from selector.precisions import weights
from selector.precisions.base import Backend, LoadContext, LoadedModel, load_tokenizer, torch_dtype


class NativeBackend(Backend):
    name = "native"
    quantizes = False

    def estimate_weights(self, arch: Any, precision: PrecisionConfig, device: str, holding: str = "in-process",
                         prequantized: bool = False) -> weights.WeightEstimate:
        return weights.dense(arch, precision, f"{precision.dtype}")

    def kernel_name(self, precision: PrecisionConfig) -> str:
        return "dense"

    def load_base(self, resolved: Any, precision: PrecisionConfig, ctx: LoadContext) -> LoadedModel:
        from transformers import AutoModelForCausalLM

        folder = resolved.path if resolved.is_local else None
        if ctx.prepare_only:  # nothing to make: the model folder is the checkpoint (a server loads it)
            return LoadedModel(None, None, ctx.device, folder)

        model = AutoModelForCausalLM.from_pretrained(
            resolved.path,
            dtype=torch_dtype(precision.dtype),
            device_map=ctx.device,
            **resolved.load_kwargs(),
        )
        model.eval()
        return LoadedModel(model, load_tokenizer(resolved), ctx.device, folder)
