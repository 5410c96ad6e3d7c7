"""Load a quantized checkpoint (one of ours, or one quantized elsewhere) with the kernel the rule
in selector/precisions/kernels.py picks, and say which kernel that was.

transformers reads the checkpoint's `quantization_config` and picks the loader; for GPTQ and AWQ
checkpoints we pass the gptqmodel kernel as the config's `backend` (a loading attribute transformers
lets a caller override), after gptqmodel itself has validated it on the device. compressed-tensors
checkpoints are either decompressed at load (`dense`: what transformers 5.17 can run) or converted
to GPTQ v2 and run packed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from selector.config import PrecisionConfig
from selector.errors import UnavailableError
from selector.precisions import kernels
from selector.precisions.loading import LoadContext, torch_dtype
from selector.precisions.kernel_info import inspect_kernel
from selector.records import KernelInfo

# gptqmodel's AWQ backends by the names transformers' AwqConfig takes for them.
AWQ_CONFIG_BACKEND = {"awq_marlin": "marlin", "awq_exllama_v2": "exllama_v2", "awq_gemm": "gemm",
                      "awq_gemm_triton": "gemm_triton", "awq_torch": "torch_awq"}


@dataclass
class CheckpointLoad:
    model: Any
    kernel: KernelInfo
    notes: list[str] = field(default_factory=list)


def load_checkpoint(path: str, precision: PrecisionConfig, ctx: LoadContext, *, local: bool, backend: str,
                    requested: str = "auto", **kwargs: Any) -> CheckpointLoad:
    """Load the checkpoint at `path` (a folder, or a hub id with `kwargs` such as its revision)."""
    qdict = quantization_config(path, ctx, local, kwargs)
    method = str(qdict.get("quant_method", ""))
    facts = _facts(method, qdict)
    if facts is None:  # bitsandbytes, torchao, fp8...: the library's own loader, no kernel choice
        model = _from_pretrained(path, precision, ctx, local, **kwargs)
        return CheckpointLoad(model, inspect_kernel(model, backend=backend, kernel=method or "dense", requested=requested))
    on_cuda = ctx.device.startswith("cuda")
    dtype = "float16" if method == "awq" and on_cuda else precision.dtype  # transformers casts AWQ to fp16 on CUDA
    decision = kernels.choose(method, requested, bits=facts["bits"], group_size=facts["group_size"], sym=facts["sym"],
                              dtype=dtype, device=ctx.device, capability=kernels.cuda_capability(ctx.device))
    if not decision.ok:
        raise UnavailableError(f"precision={precision.name}: no kernel can run this {method} checkpoint here: {decision.error}")
    notes: list[str] = []
    if dtype != precision.dtype:
        notes.append("transformers runs AWQ checkpoints in float16 on CUDA (bfloat16 was asked for)")
    if decision.library_auto:
        model = _from_pretrained(path, precision, ctx, local, **kwargs)
        return _done(model, backend, "gptqmodel-auto", decision, notes)
    passed = decision.passed_over
    for kernel in decision.candidates:
        if kernel is kernels.DENSE:
            from transformers import CompressedTensorsConfig

            model = _from_pretrained(path, precision, ctx, local, quantization_config=CompressedTensorsConfig(dequantize=True),
                                     **kwargs)
            if requested == "auto" and passed:
                notes.append("no packed kernel could run this compressed-tensors checkpoint here, so it runs "
                             f"decompressed: {'; '.join(passed)}")
            return _done(model, backend, kernel.name, decision, notes)
        source, source_local, source_kwargs = path, local, kwargs
        if method == "compressed-tensors":
            from selector.precisions.convert import ConversionError, gptq_folder

            try:
                source, source_local, source_kwargs = str(gptq_folder(_folder(path, kwargs), ctx.cache_dir)), True, {}
            except ConversionError as e:
                passed.append(f"{kernel.name}: the checkpoint does not convert to GPTQ ({e})")
                continue
        why = library_refusal(kernel, facts, ctx.device, dtype)
        if why:
            passed.append(f"{kernel.name}: {why}")
            continue
        model = _from_pretrained(source, precision, ctx, source_local, quantization_config=_config_for(method, kernel, facts),
                                 **source_kwargs)
        if method == "compressed-tensors":
            notes.append(f"compressed-tensors checkpoint converted losslessly to GPTQ v2 ({Path(source).name}) "
                         f"to run packed with gptqmodel's {kernel.name} kernel")
        return _done(model, backend, kernel.name, decision, notes)
    raise UnavailableError(f"precision={precision.name}: no kernel can run this {method} checkpoint here: "
                           + "; ".join(passed))


def quantization_config(path: str, ctx: LoadContext, local: bool, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's quantization_config as a dict ({} when it has none)."""
    from transformers import AutoConfig

    keep = {k: v for k, v in kwargs.items() if k in ("revision", "local_files_only")}
    config = AutoConfig.from_pretrained(path, trust_remote_code=ctx.model_cfg.trust_remote_code,
                                        **({"local_files_only": True} if local else {}), **keep)
    qcfg = getattr(config, "quantization_config", None)
    if qcfg is None:
        return {}
    return dict(qcfg) if isinstance(qcfg, dict) else qcfg.to_dict()


def library_refusal(kernel: kernels.Kernel, facts: dict[str, Any], device: str, dtype: str) -> str:
    """gptqmodel's own check of a kernel on this device (its capability, its compiled extension)."""
    from selector.precisions.cpu_fixes import set_gptqmodel_workers

    set_gptqmodel_workers()
    import torch
    from gptqmodel.quantization import FORMAT, METHOD
    from gptqmodel.utils.backend import BACKEND
    from gptqmodel.utils.importer import select_quant_linear

    try:
        select_quant_linear(facts["bits"], facts["group_size"], facts.get("desc_act", False), facts["sym"],
                            device=torch.device(device), backend=BACKEND(kernel.library_backend),
                            format=FORMAT(facts["format"]), quant_method=METHOD(facts["method"]),
                            pack=False, dtype=torch_dtype(dtype), pack_dtype=torch.int32)
    except Exception as e:  # gptqmodel raises ValueError/ImportError/NotImplementedError with its reason
        return f"gptqmodel refuses it here ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    return ""


def _facts(method: str, qdict: dict[str, Any]) -> dict[str, Any] | None:
    """bits/group_size/sym(/desc_act) of a checkpoint with a kernel choice; None for other formats."""
    if method == "gptq":
        fmt = str(qdict.get("checkpoint_format") or qdict.get("format") or "gptq").lower()
        return {"bits": int(qdict.get("bits", 4)), "group_size": int(qdict.get("group_size", 128)),
                "sym": bool(qdict.get("sym", True)), "desc_act": bool(qdict.get("desc_act", False)),
                "method": "gptq", "format": fmt}
    if method == "awq" and str(qdict.get("version") or qdict.get("format") or "gemm").lower() == "gemm":
        return {"bits": int(qdict.get("bits", 4)), "group_size": int(qdict.get("group_size", 128)),
                "sym": not qdict.get("zero_point", True), "method": "awq", "format": "gemm"}
    if method == "compressed-tensors":
        from selector.precisions.convert import ConversionError, scheme_of

        try:
            scheme = scheme_of(qdict)
        except ConversionError:  # not a weight-only int scheme: decompressed at load, as transformers does
            return {"bits": 4, "group_size": -1, "sym": True}  # only the dense kernel will accept it
        return {**scheme, "method": "gptq", "format": "gptq_v2"}  # run as its GPTQ v2 conversion
    return None


def _config_for(method: str, kernel: kernels.Kernel, facts: dict[str, Any]) -> Any:
    if method == "awq":
        from transformers import AwqConfig

        return AwqConfig(bits=facts["bits"], backend=AWQ_CONFIG_BACKEND[kernel.library_backend])
    from transformers import GPTQConfig

    return GPTQConfig(bits=facts["bits"], backend=kernel.library_backend)


def _folder(path: str, kwargs: dict[str, Any]) -> Path:
    """The local folder of a checkpoint: itself, or a hub repo's cached snapshot."""
    if Path(path).is_dir():
        return Path(path)
    from selector.models.resolved import _hub_snapshot

    from selector.precisions.convert import ConversionError

    folder = _hub_snapshot(path, kwargs.get("revision"))
    if folder is None:
        raise ConversionError(f"{path} is not in the local Hugging Face cache")
    return folder


def _done(model: Any, backend: str, name: str, decision: kernels.KernelDecision, notes: list[str]) -> CheckpointLoad:
    info = inspect_kernel(model, backend=backend, kernel=name, requested=decision.requested,
                          fallbacks=decision.passed_over)
    return CheckpointLoad(model, info, notes)


def _from_pretrained(path: str, precision: PrecisionConfig, ctx: LoadContext, local: bool, **kwargs: Any) -> Any:
    import warnings

    from transformers import AutoModelForCausalLM

    with warnings.catch_warnings():  # overriding a loading attribute (the kernel) is what we mean to do
        warnings.filterwarnings("ignore", message="You passed `quantization_config`")
        model = AutoModelForCausalLM.from_pretrained(
            path,
            dtype=torch_dtype(precision.dtype),
            device_map=ctx.device,
            trust_remote_code=ctx.model_cfg.trust_remote_code,
            **({"local_files_only": True} if local else {}),
            **kwargs,
        )
    model.eval()
    return model
