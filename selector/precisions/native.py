"""Native dtypes (fp32, bf16, fp16): load the weights as they are, cast to the dtype."""

from __future__ import annotations

from typing import Any

from selector.config import PrecisionConfig
from selector.precisions.base import LoadContext, LoadedModel, load_tokenizer, torch_dtype


class NativeBackend:
    def availability(self, precision: PrecisionConfig, device: str) -> tuple[bool, str]:
        return True, ""

    def load(self, resolved: Any, precision: PrecisionConfig, ctx: LoadContext) -> LoadedModel:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(
            resolved.path,
            dtype=torch_dtype(precision.dtype),
            device_map=ctx.device,
            **resolved.load_kwargs(),
        )
        model.eval()
        return LoadedModel(model, load_tokenizer(resolved), ctx.device, resolved.path if resolved.is_local else None)
