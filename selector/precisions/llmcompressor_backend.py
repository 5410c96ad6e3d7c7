"""llmcompressor 0.14: AWQ (`method: awq`, the default `awq-int4`) and GPTQ (`method: gptq`),
weight-only int4/int8, saved as compressed-tensors safetensors, the format vLLM serves natively
(llmcompressor is maintained by the vLLM project).

CPU pitfalls handled here (see docs/precisions.md):
- AWQ pins cached activations with `pin_memory()`, which raises "Cannot access accelerator device"
  on a machine without one: pinning is skipped there (cpu_fixes.no_pinned_memory_without_accelerator);
- group size 128 is refused when a layer's width is not a multiple of it (SmolLM2: 576):
  lowered to the largest power of two that divides every quantized layer.
On CPU, transformers unpacks the int4 weights to the load dtype when loading these checkpoints, so
they run at bf16 speed and memory there; vLLM on a GPU runs them with int4 kernels.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from selector.config import PrecisionConfig
from selector.precisions import artifacts, cpu_fixes, groups, local
from selector.precisions.base import LoadContext, LoadedModel, torch_dtype
from selector.precisions.prequantized import load_prequantized

BITS = (4, 8)
METHODS = ("gptq", "awq")
OWN_PARAMS = ("group_size", "symmetric", "ignore")  # ours; other params go to the modifier


class LlmCompressorBackend:
    def availability(self, precision: PrecisionConfig, device: str) -> tuple[bool, str]:
        if importlib.util.find_spec("llmcompressor") is None:
            return False, "llmcompressor is not installed (pip install 'selector[quant]')"
        if precision.method not in METHODS:
            return False, f"llmcompressor method {precision.method!r} is not one of {', '.join(METHODS)}"
        if (precision.bits or 4) not in BITS:
            return False, f"llmcompressor weight-only schemes here support bits {BITS}, not {precision.bits}"
        return True, ""

    def load(self, resolved: Any, precision: PrecisionConfig, ctx: LoadContext) -> LoadedModel:
        if getattr(resolved, "prequantized", False):
            return load_prequantized(resolved, precision, ctx)
        from importlib.metadata import version

        linears = groups.quantized_linears(resolved, ctx.model_cfg.trust_remote_code)
        sizes, notes = local.group_size(precision, linears)
        # GPTQ is usually symmetric; AWQ keeps a zero point (asymmetric), as in its paper and vLLM's presets.
        symmetric = bool(precision.params.get("symmetric", precision.method == "gptq"))
        extra = {k: v for k, v in precision.params.items() if k not in OWN_PARAMS}
        plan = local.QuantPlan(
            library="llmcompressor",
            method=str(precision.method),
            bits=precision.bits or 4,
            params={**sizes, "symmetric": symmetric,
                    "ignore": list(precision.params.get("ignore", ["lm_head"])), **extra},
            calibration=local.calibration(ctx),
            notes=notes,
            versions={"llmcompressor": version("llmcompressor"),
                      **artifacts.library_versions("compressed-tensors")},
        )

        def build(out: Path) -> None:
            quantize_to(resolved, precision, ctx, plan, out)

        return local.quantize_cached(resolved, precision, ctx, plan, build)


def quantize_to(resolved: Any, precision: PrecisionConfig, ctx: LoadContext, plan: local.QuantPlan, out: Path) -> None:
    """Quantize the base model with llmcompressor's oneshot and save compressed-tensors into `out`."""
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.awq import AWQModifier
    from llmcompressor.modifiers.quantization import GPTQModifier
    from transformers import AutoModelForCausalLM

    group_size = plan.params["group_size"]
    weights = QuantizationArgs(
        num_bits=plan.bits,
        type="int",
        symmetric=plan.params["symmetric"],
        strategy="group" if group_size > 0 else "channel",
        group_size=group_size if group_size > 0 else None,
    )
    scheme = QuantizationScheme(targets=["Linear"], weights=weights)
    extra = {k: v for k, v in plan.params.items() if k not in ("group_size", "group_size_requested", *OWN_PARAMS)}
    modifier_cls = AWQModifier if plan.method == "awq" else GPTQModifier
    modifier = modifier_cls(config_groups={"group_0": scheme}, ignore=plan.params["ignore"], **extra)

    model = AutoModelForCausalLM.from_pretrained(
        resolved.path, dtype=torch_dtype(precision.dtype), **resolved.load_kwargs()
    )
    tokenizer = local.load_tokenizer(resolved)
    seq_len = plan.calibration.info["seq_len"]
    ids = local.tokenize_calibration(tokenizer, plan.calibration.texts, seq_len)
    plan.calibration.info["tokens"] = sum(len(x) for x in ids)
    data = Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(x) for x in ids]})
    with cpu_fixes.no_pinned_memory_without_accelerator():
        oneshot(
            model=model,
            dataset=data,
            recipe=[modifier],
            num_calibration_samples=len(ids),
            max_seq_length=seq_len,
            shuffle_calibration_samples=False,  # the texts are already in their seeded order
        )
    model.save_pretrained(out, save_compressed=True)
    local.save_tokenizer(resolved, out)
