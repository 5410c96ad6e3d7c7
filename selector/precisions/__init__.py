"""Precision backends, by the `backend` name a precision config gives.

A backend is one module holding one `selector.precisions.base.Backend` subclass, plus one line
here (docs/precisions.md, "Adding a backend"). Each module imports its library only inside its
functions, so listing and validating configs works without the quantization libraries installed.
"""

from __future__ import annotations

from selector.registry import Registry

BACKENDS: Registry = Registry("precision backend")
BACKENDS.register("native", "selector.precisions.native:NativeBackend")
BACKENDS.register("bnb", "selector.precisions.bnb:BnbBackend")
BACKENDS.register("torchao", "selector.precisions.torchao_backend:TorchAoBackend")
BACKENDS.register("gptqmodel", "selector.precisions.gptqmodel_backend:GptqModelBackend")
BACKENDS.register("llmcompressor", "selector.precisions.llmcompressor_backend:LlmCompressorBackend")


def get_backend(name: str):
    return BACKENDS.get(name)()


def load_variant(model, precision, cache_dir, device: str, *, calibration=None, calibration_texts=None,
                 prepare_only: bool = False, progress: bool = True):  # type: ignore[no-untyped-def]
    """(resolved source, loaded model) of one model x precision, loaded the way every selector run
    loads a variant: the model's source resolved (converted on first use, or the pre-quantized
    checkpoint the precision names), then the precision's backend loads it, quantizing into the
    cache or reusing what is there. The sweep's worker and preparation process, the fidelity
    reference, scripts/gpu_check.py and the benchmarks all load through here.

    model: ModelConfig; precision: PrecisionConfig; calibration: CalibrationConfig (default: the
    schema's); calibration_texts: a callable giving the calibration texts (default: the corpus)."""
    from pathlib import Path

    from selector import models
    from selector.config import CalibrationConfig
    from selector.precisions.loading import LoadContext

    resolved = models.resolve(model, Path(cache_dir), precision=precision.name, dtype=precision.dtype,
                              progress=progress)
    ctx = LoadContext(model_cfg=model, device=device, cache_dir=Path(cache_dir),
                      calibration=calibration if calibration is not None else CalibrationConfig(),
                      progress=progress, prepare_only=prepare_only)
    if calibration_texts is not None:
        ctx.calibration_texts = calibration_texts
    return resolved, get_backend(precision.backend).load(resolved, precision, ctx)
