"""Which device a variant runs on: `device=auto` is the first GPU when there is one."""

from __future__ import annotations

from selector.errors import UnavailableError


def resolve_device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UnavailableError(f"device={name} was asked for but CUDA is not available on this machine")
    return name
