"""gptqmodel 7.6: GPTQ (`method: gptq`, 2/3/4/8 bit) and AWQ (`method: awq`, 4 bit), calibrated
locally and cached as a safetensors checkpoint in the GPTQ / AWQ-GEMM format that transformers,
vLLM and SGLang load.

CPU pitfalls handled here (measured, see docs/precisions.md):
- GPTQMODEL_CPU_WORKERS is set before the first import (its pool breaks on 2 cores otherwise);
- AWQ picks a CUDA kernel by default ("AWQ: CUDA is not available"): on CPU we ask for the
  `awq_torch` kernel, which only packs bf16/fp16 weights, so AWQ on CPU needs dtype bfloat16;
- its AWQ clip search needs every clipped layer's out_features to be a multiple of 64;
- the group size is lowered to one that divides every quantized layer (SmolLM2: 128 -> 64);
- it writes per-layer logs into ./logs of the working directory: redirected to a temporary folder;
- Gemma 3's config gains stray RoPE keys during loading that make saving fail: stripped first.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from selector.config import PrecisionConfig
from selector.errors import UnavailableError
from selector.precisions import artifacts, calibrated, cpu_fixes, groups, kernels, weights
from selector.precisions.base import Backend, LoadContext, LoadedModel, torch_dtype
from selector.precisions.params import set_fields

BITS = {"gptq": (2, 3, 4, 8), "awq": (4,)}
FORMAT = {"gptq": "gptq", "awq": "awq"}  # the checkpoint format each method saves (kernels.ORDER key)
Kernel = Literal["auto", "marlin", "exllama", "triton", "gemm", "torch"]


@dataclass(frozen=True)
class GptqModelParams:
    group_size: int = 128  # lowered automatically when it does not divide every layer (recorded)
    batch_size: int = 4  # calibration batch size
    kernel: Kernel = "auto"  # which gptqmodel kernel runs the checkpoint (selector/precisions/kernels.py)
    # Passed on to gptqmodel's GPTQConfig / AWQConfig when set (they change the artifact):
    sym: bool | None = None
    desc_act: bool | None = None
    damp_percent: float | None = None
    damp_auto_increment: float | None = None
    true_sequential: bool | None = None
    act_group_aware: bool | None = None
    static_groups: bool | None = None
    mse: float | None = None

    def library_params(self) -> dict[str, Any]:
        return {k: v for k, v in set_fields(self).items() if k not in ("group_size", "batch_size", "kernel")}


class GptqModelBackend(Backend):
    name = "gptqmodel"
    library = "gptqmodel"
    Params = GptqModelParams
    calibrates = True
    builds_artifact = True

    def unsupported(self, precision: PrecisionConfig, device: str) -> str:
        if precision.method not in BITS:
            return f"gptqmodel method {precision.method!r} is not one of {', '.join(BITS)}"
        bits = precision.bits or 4
        if bits not in BITS[precision.method]:
            return f"gptqmodel {precision.method} supports bits {BITS[precision.method]}, not {bits}"
        if precision.method == "awq" and device == "cpu" and precision.dtype == "float32":
            return "gptqmodel AWQ on CPU needs dtype bfloat16 or float16 (its awq_torch kernel has no float32)"
        kernel = self.params(precision).kernel
        if not device.startswith("cuda"):
            return kernels.choose(FORMAT[precision.method], kernel, bits=bits, group_size=128, sym=True,
                                  dtype=precision.dtype, device=device).error
        return ""

    def kernel_decision(self, precision: PrecisionConfig, device: str,
                        capability: tuple[int, int] | None) -> kernels.KernelDecision | None:
        params = self.params(precision)
        sym = params.sym if params.sym is not None else precision.method == "gptq"
        awq_on_cuda = precision.method == "awq" and device.startswith("cuda")  # transformers casts AWQ to fp16 there
        return kernels.choose(FORMAT[str(precision.method)], params.kernel, bits=precision.bits or 4,
                              group_size=params.group_size, sym=sym, dtype="float16" if awq_on_cuda else precision.dtype,
                              device=device, capability=capability)

    def estimate_weights(self, arch: Any, precision: PrecisionConfig, device: str, holding: str = "in-process",
                         prequantized: bool = False) -> weights.WeightEstimate:
        # Every gptqmodel kernel, on CPU and CUDA, keeps the GPTQ / AWQ-GEMM layout packed; GPTQ adds g_idx.
        return weights.packed_checkpoint(arch, precision, self.params(precision).group_size,
                                         g_idx=precision.method == "gptq")

    def load(self, resolved: Any, precision: PrecisionConfig, ctx: LoadContext) -> LoadedModel:
        cpu_fixes.set_gptqmodel_workers()  # before gptqmodel is first imported, also for pre-quantized loads
        return super().load(resolved, precision, ctx)

    def load_base(self, resolved: Any, precision: PrecisionConfig, ctx: LoadContext) -> LoadedModel:
        import gptqmodel

        params = self.params(precision)
        linears = groups.quantized_linears(resolved, ctx.model_cfg.trust_remote_code)
        if precision.method == "awq":
            misfits = groups.awq_clip_misfits(linears)
            if misfits:
                shown = ", ".join(f"{s.name} ({s.out_features})" for s in misfits[:3])
                raise UnavailableError(
                    f"gptqmodel AWQ needs out_features divisible by {groups.AWQ_CLIP_ROWS}; {shown} are not "
                    "(use awq-int4, the llmcompressor AWQ)"
                )
        sizes, notes = calibrated.group_size(params.group_size, linears)
        plan = calibrated.QuantPlan(
            library="gptqmodel",
            method=str(precision.method),
            bits=precision.bits or 4,
            params={**sizes, "batch_size": params.batch_size, **params.library_params()},
            calibration=calibrated.calibration(ctx),
            notes=notes,
            versions={"gptqmodel": gptqmodel.__version__, **artifacts.library_versions()},
        )

        def build(out: Path) -> None:
            quantize_to(resolved, precision, ctx, plan, out)

        return calibrated.quantize_cached(resolved, precision, ctx, plan, build, self.name, params.kernel)


def quantize_to(resolved: Any, precision: PrecisionConfig, ctx: LoadContext, plan: calibrated.QuantPlan, out: Path) -> None:
    """Quantize the base model with gptqmodel and save it (safetensors) into `out`."""
    from gptqmodel import BACKEND, GPTQModel
    from gptqmodel.quantization import AWQConfig, GPTQConfig

    on_cpu = not ctx.device.startswith("cuda")
    extra = {k: v for k, v in plan.params.items() if k not in ("group_size", "group_size_requested", "batch_size")}
    config_cls = AWQConfig if plan.method == "awq" else GPTQConfig
    qcfg = config_cls(bits=plan.bits, group_size=plan.params["group_size"], device=ctx.device, **extra)
    model = GPTQModel.load(
        str(resolved.path),
        qcfg,
        dtype=torch_dtype(precision.dtype),
        trust_remote_code=ctx.model_cfg.trust_remote_code,
        # gptqmodel forwards unknown kwargs to the model's constructor: pass only the revision.
        **({"revision": resolved.revision} if getattr(resolved, "revision", None) else {}),
    )
    tokenizer = calibrated.load_tokenizer(resolved)
    ids = calibrated.tokenize_calibration(tokenizer, plan.calibration.texts, plan.calibration.info["seq_len"])
    plan.calibration.info["tokens"] = sum(len(x) for x in ids)
    rows = [{"input_ids": x, "attention_mask": [1] * len(x)} for x in ids]
    # AWQ's default kernel choice is a CUDA one; the portable torch kernel packs on CPU.
    backend = BACKEND.AWQ_TORCH if plan.method == "awq" and on_cpu else BACKEND.AUTO
    with tempfile.TemporaryDirectory(prefix="gptqmodel-logs-") as logs, cpu_fixes.gptqmodel_logs_in(Path(logs)):
        model.quantize(rows, batch_size=plan.params["batch_size"], backend=backend)
    removed = cpu_fixes.strip_stray_rope_type(model.model.config)
    if removed:
        plan.notes.append(f"removed stray rope_parameters keys {removed} before saving")
    model.save(str(out))
    calibrated.save_tokenizer(resolved, out)
    for leftover in ("quant_log.csv",):  # gptqmodel's per-layer log: not part of a checkpoint
        (out / leftover).unlink(missing_ok=True)
