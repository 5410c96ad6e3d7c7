"""Can this variant run here? One answer for the sweep's preflight (before anything starts) and
for the worker (on the device it actually got): the model's source and needs, and the precision
backend's own check (library installed, device supported, a kernel for this GPU)."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

from selector.config import SelectorConfig
from selector.errors import ConfigError
from selector.origin import Origin


@functools.lru_cache(maxsize=1)
def cuda_available() -> bool:
    if not gpu_device_files():  # torch would say no too, after a second or two of importing it
        return False
    import torch

    return torch.cuda.is_available()


def gpu_device_files() -> bool:
    """Whether a GPU driver's device files exist (NVIDIA, ROCm, WSL's GPU); True where there is no such
    cheap test (not Linux), so that torch is asked."""
    if not sys.platform.startswith("linux"):
        return True
    dev = Path("/dev")
    return any(dev.glob("nvidia[0-9]*")) or (dev / "kfd").exists() or (dev / "dxg").exists()


def planned_device(cfg: SelectorConfig) -> str:
    """Where the variant would run: "cuda" or "cpu"."""
    wants_cuda = cfg.device.startswith("cuda") or (cfg.device == "auto" and cuda_available())
    return "cuda" if wants_cuda else "cpu"


def check_precision(cfg: SelectorConfig, origin: Origin = Origin()) -> None:
    """The precision names a registered backend and gives it params it takes; a ConfigError naming
    its config file (packaged or in a user's folder), the line and the field otherwise (before
    anything loads)."""
    from selector.precisions import get_backend

    try:
        backend = get_backend(cfg.precision.backend)
    except KeyError as e:
        raise origin.error("precision.backend", str(e), stem=cfg.precision.name) from None
    backend.params(cfg.precision, origin)


def availability(cfg: SelectorConfig, device: str | None = None, load_library: bool = True) -> tuple[bool, str]:
    """(True, "") or (False, the reason in one line). device: the one the variant got (a worker),
    or None for where it would run. load_library=False: the precision's library counts when it is
    installed, without importing it (the sweep's own process; the worker checks it again)."""
    from selector import models
    from selector.precisions import get_backend

    device = device or planned_device(cfg)
    kind = device.split(":")[0]
    if cfg.model.requires_cuda and (kind != "cuda" or not cuda_available()):
        return False, f"model={cfg.model.name} needs a CUDA GPU and " + (
            "torch.cuda.is_available() is False here" if not cuda_available() else f"this run is on {kind}")
    if cfg.device.startswith("cuda") and not cuda_available():
        return False, f"device={cfg.device} but CUDA is not available here"
    from selector.engines import engine_for

    why = engine_for(cfg.engine).unavailable(cfg)
    if why:
        return False, why
    ok, why = models.check_available(cfg.model, precision=cfg.precision.name, dtype=cfg.precision.dtype,
                                     cache_dir=Path(cfg.cache_dir))
    if not ok:
        return False, f"model={cfg.model.name}: {why}"
    try:
        ok, why = get_backend(cfg.precision.backend).availability(cfg.precision, device,
                                                                 load_library=load_library)
    except KeyError as e:
        raise ConfigError(f"conf/precision/{cfg.precision.name}.yaml", "backend", str(e)) from None
    if not ok:
        return False, f"precision={cfg.precision.name} is not available on {kind}: {why}"
    return True, ""
