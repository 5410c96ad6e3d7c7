"""Narrow workarounds for quantization libraries on CPU, each for one measured failure.

Each one is applied only where it is needed and says why; tests/unit/test_precisions_fixes.py and
the integration tests show each failure they prevent.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Iterator

GPTQMODEL_WORKERS_ENV = "GPTQMODEL_CPU_WORKERS"


def gptqmodel_cpu_workers(cores: int | None = None) -> int:
    """Worker threads for gptqmodel's CPU pool: min(2, cores), never below 1.

    gptqmodel sizes its pool from the core count; on a 2-core machine a pool of 1 makes its model
    loader fail with "Virtual pool 'model_loader:cpu' requests 2 workers". Two works on 2 cores.
    """
    return max(1, min(2, cores if cores is not None else (os.cpu_count() or 1)))


def set_gptqmodel_workers() -> None:
    """Set GPTQMODEL_CPU_WORKERS before gptqmodel is imported (it reads it once, at import)."""
    os.environ.setdefault(GPTQMODEL_WORKERS_ENV, str(gptqmodel_cpu_workers()))


def accelerator_available() -> bool:
    import torch

    accel = getattr(torch, "accelerator", None)
    if accel is not None and hasattr(accel, "is_available"):
        return bool(accel.is_available())
    return torch.cuda.is_available()


@contextlib.contextmanager
def no_pinned_memory_without_accelerator() -> Iterator[None]:
    """Turn llmcompressor's IntermediatesCache.pin_memory into a no-op while no accelerator exists.

    llmcompressor 0.14's AWQ pins its cached activations (pipelines/cache.py) to speed up host->GPU
    copies; `Tensor.pin_memory()` raises "Cannot access accelerator device when none is available"
    on a CPU-only machine, and the library offers no switch. Pinning is only a transfer speed-up,
    so skipping it changes no result. Restored on exit; does nothing when an accelerator exists.
    """
    if accelerator_available():
        yield
        return
    from llmcompressor.pipelines.cache import IntermediatesCache

    original = IntermediatesCache.pin_memory

    def skip_pinning(self: Any, batch_index: int, input_names: list[str] | None = None) -> None:
        return None

    IntermediatesCache.pin_memory = skip_pinning  # type: ignore[method-assign]
    try:
        yield
    finally:
        IntermediatesCache.pin_memory = original  # type: ignore[method-assign]


def strip_stray_rope_type(config: Any) -> list[str]:
    """Drop keys that are not layer types from a per-layer-type `rope_parameters`; return them.

    Gemma 3 keeps RoPE settings per attention type: {"sliding_attention": {...}, "full_attention":
    {...}}. gptqmodel 7.6's RoPE normaliser adds `rope_type` (and a `rope_theta` dict) at the top
    of that mapping, and transformers' config validation then fails while saving
    ("'str' object has no attribute 'get'"). The real settings stay in the per-type entries, so the
    stray keys carry nothing; we remove them before saving. A config without per-type RoPE is left
    alone.
    """
    removed: list[str] = []
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict):
        # A per-layer-type entry is itself a RoPE mapping (it has a rope_type); the strays are not.
        def is_entry(value: Any) -> bool:
            return isinstance(value, dict) and "rope_type" in value

        if any(is_entry(v) for v in params.values()):
            removed = [k for k, v in params.items() if not is_entry(v)]
            for k in removed:
                del params[k]
    inner = getattr(config, "text_config", None)
    if inner is not None and inner is not config:
        removed += strip_stray_rope_type(inner)
    return removed


@contextlib.contextmanager
def gptqmodel_logs_in(folder: Path) -> Iterator[None]:
    """gptqmodel writes per-layer logs into ./logs of whatever the working directory is: send them
    to `folder` instead, so a sweep never litters the user's project."""
    from gptqmodel.looper import loop_processor

    before = loop_processor._PROJECT_LOG_DIR
    loop_processor._PROJECT_LOG_DIR = folder
    try:
        yield
    finally:
        loop_processor._PROJECT_LOG_DIR = before
