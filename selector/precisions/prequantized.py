"""Load a checkpoint that was quantized elsewhere (ModelConfig.prequantized), without quantizing.

One branch for every backend (Backend.load calls it): transformers reads the checkpoint's
`quantization_config` and picks the loader: GPTQ (also old auto-gptq checkpoints) and AWQ (also old
autoawq checkpoints) through gptqmodel, with the kernel the precision's `kernel` param and the
kernel rule choose; compressed-tensors (llmcompressor output) decompressed or converted to run
packed; bitsandbytes and torchao through their own integrations.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from selector.config import PrecisionConfig
from selector.errors import ConfigError
from selector.precisions.loading import LoadContext, LoadedModel, dir_bytes, load_tokenizer
from selector.precisions.cpu_fixes import set_gptqmodel_workers
from selector.records import QuantInfo

# quant_method in config.json -> the package that loads it
LOADER_PACKAGE = {
    "gptq": "gptqmodel",
    "awq": "gptqmodel",
    "compressed-tensors": "compressed-tensors",
    "bitsandbytes": "bitsandbytes",
    "torchao": "torchao",
    "fp8": "transformers",
}
SCALAR = (str, int, float, bool, type(None))


def load_prequantized(resolved: Any, precision: PrecisionConfig, ctx: LoadContext, backend: str,
                      kernel: str = "auto") -> LoadedModel:
    from selector.precisions.checkpoint import load_checkpoint, quantization_config

    kwargs = {k: v for k, v in resolved.load_kwargs().items() if k != "trust_remote_code"}
    qdict = quantization_config(resolved.path, ctx, False, kwargs)
    if not qdict:
        raise ConfigError(
            f"conf/model/{ctx.model_cfg.name}.yaml",
            f"prequantized.{precision.name}",
            f"{resolved.path} has no quantization_config in its config.json: it is not a quantized checkpoint",
        )
    method = str(qdict.get("quant_method", "unknown"))
    package = LOADER_PACKAGE.get(method, "transformers")
    if package == "gptqmodel":
        set_gptqmodel_workers()
    loaded = (LoadedModel(None, None, ctx.device) if ctx.prepare_only  # a server loads it: nothing to load here
              else load_checkpoint(resolved.path, precision, ctx, local=False, backend=backend, requested=kernel, **kwargs))
    artifact_dir = str(resolved.path) if getattr(resolved, "is_local", False) else None
    quant = QuantInfo(
        method=method,
        library=package,
        library_version=_version(package),
        params={k: v for k, v in qdict.items() if isinstance(v, SCALAR) and k != "quant_method"},
        cached=False,
        quantize_s=None,
        artifact_dir=artifact_dir,
        artifact_bytes=dir_bytes(artifact_dir),
        calibration={"source": "prequantized"},
    )
    notes = [f"loaded pre-quantized checkpoint {resolved.path} ({method}); nothing was quantized here", *loaded.notes]
    tokenizer = None if ctx.prepare_only else load_tokenizer(resolved)
    return LoadedModel(loaded.model, tokenizer, ctx.device, artifact_dir, quant, notes, loaded.kernel)


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "absent"
