"""A record's checkpoint: how it was quantized (RunRecord.quant), which kernel ran its linear layers
(RunRecord.kernel), and what quantization changed against the baseline (RunRecord.fidelity)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from selector.records_strict import StrictModel


class KernelInfo(StrictModel):
    """Which code ran the linear layers: a broken or unpacked kernel can look like accuracy loss."""

    backend: str  # the precision backend (native, bnb, torchao, gptqmodel, llmcompressor, ...)
    kernel: str  # short name: dense, marlin, exllama, torch, gptqmodel-auto, bnb-int8, torchao, ...
    requested: str = "auto"  # what the precision's `kernel` param asked for
    linear_class: str  # module path and class of the first quantized linear layer (torch.nn.Linear if none)
    weight_class: str = ""  # tensor subclass holding its weight (torchao), "" for plain tensors
    quantized_layers: int = 0  # linear layers of a quantized kind
    plain_layers: int = 0  # plain torch.nn.Linear layers with dense weights (the LM head not counted)
    library_kernel: str = ""  # the library's own name for it (gptqmodel's backend, e.g. gptq_marlin)
    unpacked: bool = False  # a quantized precision whose linear layers run as plain dense Linear
    dtype: str = ""  # the compute dtype the model was loaded in
    fallbacks: list[str] = Field(default_factory=list)  # kernels passed over, and why


class QuantInfo(StrictModel):
    method: str
    library: str
    library_version: str
    params: dict[str, Any] = Field(default_factory=dict)
    # True: the artifact was read from the cache, made by an earlier run (quantize_s is what it took
    # then); False: quantized by the run that made this record (its preparation process)
    cached: bool = False
    quantize_s: float | None = None
    artifact_dir: str | None = None
    artifact_bytes: int | None = None
    calibration: dict[str, Any] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)  # what loading changed or could not do, for a person


class FidelityResult(StrictModel):
    """What quantization changed, against the baseline precision of the same model."""

    baseline: str  # variant name of the baseline
    mean_kl: float
    top1_agreement: float
    positions: int
    # full: the variant's whole next-token distribution (in-process); top-N: the N most likely
    # tokens a server returns per position (a coarser, still lower, bound: selector/measure/fidelity.py)
    method: str = "full"
    # top-N only: positions where the server named none of the baseline's top tokens; there mean_kl
    # holds the most a top-N can show, however far the variant moved (0 in records from before)
    disjoint: int = 0
