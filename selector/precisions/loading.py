"""What loading a precision works with: the context a backend loads in, the model it returns, and
the small helpers every loading path shares (dtype names, the tokenizer, sizes on disk).

Kept apart from base.py so the loading paths (checkpoints, pre-quantized folders, group sizes) can
use them without importing the Backend class that dispatches to them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from selector.config import CalibrationConfig, ModelConfig
from selector.records import KernelInfo, QuantInfo


@dataclass
class LoadContext:
    model_cfg: ModelConfig
    device: str  # "cpu" or "cuda:0"
    cache_dir: Path
    calibration: CalibrationConfig
    # Returns the calibration texts (source chosen by config; by default text not in the eval set).
    calibration_texts: Callable[[], list[str]] = lambda: []
    progress: bool = True
    # Build the cached artifact and stop: the preparation process (variant/prepare.py) makes it, the
    # variant's own process loads it. LoadedModel.model is None then.
    prepare_only: bool = False


@dataclass
class LoadedModel:
    model: Any  # a transformers PreTrainedModel, in eval mode, on ctx.device
    tokenizer: Any
    device: str
    artifact_dir: str | None = None  # checkpoint folder that was loaded (for its size on disk)
    quant: QuantInfo | None = None
    notes: list[str] = field(default_factory=list)
    kernel: KernelInfo | None = None  # what runs the linear layers (filled in by Backend.load)


def torch_dtype(name: str) -> Any:
    import torch

    try:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}: use float32, bfloat16 or float16") from None


def load_tokenizer(resolved: Any) -> Any:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolved.path, **resolved.load_kwargs())
    if tok.pad_token is None:  # batched generation needs one; eos is the usual stand-in
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def config_kwargs(resolved: Any) -> dict[str, Any]:
    """The subset of `resolved.load_kwargs()` that AutoConfig understands (others become attributes)."""
    keep = ("revision", "trust_remote_code", "local_files_only")
    return {k: v for k, v in resolved.load_kwargs().items() if k in keep}


def dir_bytes(path: str | Path | None) -> int | None:
    if not path or not Path(path).is_dir():
        return None
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())
