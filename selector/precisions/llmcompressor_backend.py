"""llmcompressor 0.14: AWQ (`method: awq`, the default `awq-int4`) and GPTQ (`method: gptq`),
weight-only int4/int8, and INT8 W8A8 (`activations: int8`: int8 per-channel weights with int8
activations quantized per token at run time, `int8-w8a8`, the 8-bit vLLM serves), saved as
compressed-tensors safetensors, the format vLLM serves natively (llmcompressor is maintained by the
vLLM project).

CPU pitfalls handled here (see docs/precisions.md):
- AWQ pins cached activations with `pin_memory()`, which raises "Cannot access accelerator device"
  on a machine without one: pinning is skipped there (cpu_fixes.no_pinned_memory_without_accelerator);
- group size 128 is refused when a layer's width is not a multiple of it (SmolLM2: 576):
  lowered to the largest power of two that divides every quantized layer.
In-process, transformers 5.17 decompresses these checkpoints to the load dtype (kernel `dense`):
on CPU that is the default (bf16 speed and memory). On CUDA the default (`auto`) converts the
checkpoint losslessly to GPTQ v2 and runs it packed with gptqmodel's kernels (kernels.py); vLLM
serves the compressed-tensors checkpoint itself with its int4 kernels. A W8A8 checkpoint runs dense
in-process on any device (compressed-tensors quantizes each activation on the fly, so the answers
are W8A8's; the speed is bf16's); vLLM runs it with int8 GEMMs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from selector.config import PrecisionConfig
from selector.precisions import artifacts, calibrated, cpu_fixes, groups, kernels, weights
from selector.precisions.base import Backend, LoadContext, LoadedModel, torch_dtype
from selector.origin import Origin
from selector.precisions.params import param_error

BITS = (4, 8)
METHODS = ("gptq", "awq")
OWN_PARAMS = ("group_size", "symmetric", "ignore", "activations", "batch_size")  # ours; the rest go to the modifier
Kernel = Literal["auto", "dense", "marlin", "exllama", "triton", "torch"]
PER_CHANNEL = -1  # the kernel rule's word for one scale per output row (group_size <= 0 here)


@dataclass(frozen=True)
class LlmCompressorParams:
    group_size: int = 128  # lowered automatically when it does not divide every layer (recorded)
    # GPTQ is usually symmetric; AWQ keeps a zero point (asymmetric), as in its paper and vLLM's presets.
    symmetric: bool | None = None
    ignore: list[str] | None = None  # layers left unquantized (default: the LM head)
    # int8: W8A8, activations quantized to int8 per token at run time (dynamic, symmetric). Needs
    # bits 8 and per-channel weights (group_size 0), the scheme vLLM's int8 kernels run.
    activations: Literal["int8"] | None = None
    kernel: Kernel = "auto"  # dense: transformers decompresses; others: converted to GPTQ v2, gptqmodel runs it
    # Calibration samples per forward pass when they are all one length (the built-in corpus); samples of
    # different lengths run one at a time (llmcompressor would cut a batch to its shortest sample).
    batch_size: int = 16
    # Passed on to the modifier when set:
    block_size: int | None = None  # GPTQ
    dampening_frac: float | None = None  # GPTQ
    actorder: Literal["static", "group", "weight"] | None = None  # GPTQ
    duo_scaling: bool | None = None  # AWQ

    def modifier_params(self, method: str) -> dict[str, Any]:
        only = {"gptq": ("block_size", "dampening_frac", "actorder"), "awq": ("duo_scaling",)}[method]
        return {k: getattr(self, k) for k in only if getattr(self, k) is not None}


class LlmCompressorBackend(Backend):
    name = "llmcompressor"
    library = "llmcompressor"
    Params = LlmCompressorParams
    calibrates = True
    builds_artifact = True

    def params(self, precision: PrecisionConfig, origin: Origin = Origin()) -> Any:
        params = super().params(precision, origin)
        other = {"gptq": ("duo_scaling",), "awq": ("block_size", "dampening_frac", "actorder")}.get(str(precision.method), ())
        wrong = [k for k in other if getattr(params, k) is not None]
        if wrong:
            raise param_error(precision, wrong[0], f"does not apply to method {precision.method}", origin)
        if params.batch_size < 1:
            raise param_error(precision, "batch_size", f"must be at least 1, got {params.batch_size}", origin)
        if params.activations and (precision.bits != 8 or params.group_size > 0):
            raise param_error(precision, "activations", "int8 activations (W8A8) need bits: 8 and per-channel "
                              f"weights (group_size: 0), not bits {precision.bits} and group_size {params.group_size}",
                              origin)
        if params.activations and params.kernel not in ("auto", "dense"):
            raise param_error(precision, "kernel", "a W8A8 checkpoint runs dense in-process (auto or dense); the "
                              "packed GPTQ kernels take weight-only checkpoints", origin)
        return params

    def unsupported(self, precision: PrecisionConfig, device: str) -> str:
        if precision.method not in METHODS:
            return f"llmcompressor method {precision.method!r} is not one of {', '.join(METHODS)}"
        if (precision.bits or 4) not in BITS:
            return f"llmcompressor weight-only schemes here support bits {BITS}, not {precision.bits}"
        if not device.startswith("cuda"):
            return self.kernel_decision(precision, device, None).error
        return ""

    def kernel_decision(self, precision: PrecisionConfig, device: str, capability: tuple[int, int] | None,
                        group_size: int | None = None) -> kernels.KernelDecision:
        """group_size: the one used for a known model (the requested one is lowered to fit its widths)."""
        params = self.params(precision)
        size = group_size or params.group_size
        return kernels.choose("compressed-tensors", "dense" if params.activations else params.kernel,
                              bits=precision.bits or 4, group_size=size if size > 0 else PER_CHANNEL,
                              sym=self.symmetric(precision), dtype=precision.dtype, device=device,
                              capability=capability)

    def symmetric(self, precision: PrecisionConfig) -> bool:
        given = self.params(precision).symmetric
        return given if given is not None else precision.method == "gptq"

    def estimate_weights(self, arch: Any, precision: PrecisionConfig, device: str, holding: str = "in-process",
                         prequantized: bool = False) -> weights.WeightEstimate:
        params = self.params(precision)
        group = params.group_size
        if params.activations:
            if weights.served(holding):  # int8 per-channel weights, run by vLLM's int8 GEMM kernels
                return weights.packed_checkpoint(arch, precision, group, g_idx=False, zero_points=False,
                                                 how="W8A8 (served, int8 GEMMs)")
            return weights.dense(arch, precision, f"{precision.dtype} (W8A8 decompressed, activations quantized "
                                                  "on the fly)", ["engine=vllm runs it with int8 GEMMs"])
        if weights.served(holding):  # vLLM runs compressed-tensors packed, as saved (no g_idx)
            return weights.packed_checkpoint(arch, precision, group, g_idx=False, how="packed (served)")
        if prequantized:  # a GPTQ/AWQ checkpoint from elsewhere is run packed by gptqmodel
            return weights.packed_checkpoint(arch, precision, group, g_idx=precision.method == "gptq")
        decision = self.kernel_decision(precision, device, None, weights.group_size(arch, group))
        if decision.ok and decision.packed:  # converted to GPTQ v2: int32 g_idx per input column
            return weights.packed_checkpoint(arch, precision, group, g_idx=True,
                                             how=f"packed (GPTQ v2, {decision.candidates[0].name} kernel)")
        if device.startswith("cuda"):
            return weights.dense(arch, precision, f"{precision.dtype} (compressed-tensors unpacked, kernel dense)")
        return weights.dense(arch, precision, f"{precision.dtype} (compressed-tensors unpacked on CPU)",
                             ["kernel auto on a GPU converts it to GPTQ and keeps it packed"])

    def load(self, resolved: Any, precision: PrecisionConfig, ctx: LoadContext) -> LoadedModel:
        cpu_fixes.set_gptqmodel_workers()  # converted checkpoints run on gptqmodel's kernels
        return super().load(resolved, precision, ctx)

    def load_base(self, resolved: Any, precision: PrecisionConfig, ctx: LoadContext) -> LoadedModel:
        from importlib.metadata import version

        params = self.params(precision)
        linears = groups.quantized_linears(resolved, ctx.model_cfg.trust_remote_code)
        sizes, notes = calibrated.group_size(params.group_size, linears)
        plan = calibrated.QuantPlan(
            library="llmcompressor",
            method=str(precision.method),
            bits=precision.bits or 4,
            params={**sizes, "symmetric": self.symmetric(precision),
                    "ignore": list(params.ignore if params.ignore is not None else ["lm_head"]),
                    "batch_size": params.batch_size,
                    # only when set, so weight-only checkpoints keep the cache keys they had
                    **({"activations": params.activations} if params.activations else {}),
                    **params.modifier_params(str(precision.method))},
            calibration=calibrated.calibration(ctx),
            notes=notes,
            versions={"llmcompressor": version("llmcompressor"),
                      **artifacts.library_versions("compressed-tensors")},
        )

        def build(out: Path) -> None:
            quantize_to(resolved, precision, ctx, plan, out)

        return calibrated.quantize_cached(resolved, precision, ctx, plan, build, self.name, params.kernel)


def quantize_to(resolved: Any, precision: PrecisionConfig, ctx: LoadContext, plan: calibrated.QuantPlan, out: Path) -> None:
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
    # W8A8 as llmcompressor's preset has it: int8 activations, one scale per token, computed at run time
    activations = QuantizationArgs(num_bits=8, type="int", symmetric=True, strategy="token", dynamic=True) \
        if plan.params.get("activations") == "int8" else None
    scheme = QuantizationScheme(targets=["Linear"], weights=weights, input_activations=activations)
    extra = {k: v for k, v in plan.params.items() if k not in ("group_size", "group_size_requested", *OWN_PARAMS)}
    modifier_cls = AWQModifier if plan.method == "awq" else GPTQModifier
    modifier = modifier_cls(config_groups={"group_0": scheme}, ignore=plan.params["ignore"], **extra)

    model = AutoModelForCausalLM.from_pretrained(
        resolved.path, dtype=torch_dtype(precision.dtype), **resolved.load_kwargs()
    )
    tokenizer = calibrated.load_tokenizer(resolved)
    seq_len = plan.calibration.info["seq_len"]
    ids = calibrated.tokenize_calibration(tokenizer, plan.calibration.texts, seq_len)
    plan.calibration.info["tokens"] = sum(len(x) for x in ids)
    batch_size = calibration_batch(ids, plan.params["batch_size"])
    plan.calibration.info["batch_size"] = batch_size
    data = Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(x) for x in ids]})
    with cpu_fixes.no_pinned_memory_without_accelerator():
        oneshot(
            model=model,
            dataset=data,
            recipe=[modifier],
            num_calibration_samples=len(ids),
            max_seq_length=seq_len,
            batch_size=batch_size,
            shuffle_calibration_samples=False,  # the texts are already in their seeded order
        )
    model.save_pretrained(out, save_compressed=True)
    calibrated.save_tokenizer(resolved, out)


def calibration_batch(ids: list[list[int]], requested: int) -> int:
    """Samples per forward pass: `requested` when every sample has the same length, else 1. Batching
    gives the same tokens to fewer, larger matrix products (AWQ of SmolLM2-135M on 2 cores: 186 -> 147
    s); llmcompressor's collator would cut a batch of unequal samples to its shortest, so those run
    one at a time and every calibration token is still seen."""
    return max(1, min(requested, len(ids))) if len({len(x) for x in ids}) == 1 else 1
