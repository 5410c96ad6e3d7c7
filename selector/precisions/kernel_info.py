"""What actually runs a loaded model's linear layers, read off the model itself (KernelInfo).

A quantized precision whose layers turn out to be plain `torch.nn.Linear` with dense weights was
unpacked by its loader; that is recorded as such, from the modules, not guessed from sizes.
"""

from __future__ import annotations

from typing import Any

from selector.records import KernelInfo


def inspect_kernel(model: Any, *, backend: str, kernel: str, requested: str = "auto", quantized: bool = True,
                   fallbacks: list[str] | None = None) -> KernelInfo:
    """KernelInfo of `model`. quantized: whether the precision quantizes (native does not)."""
    head = _output_head(model)
    first_quantized: Any = None
    n_quantized = n_plain = 0
    for module in model.modules():
        if module is head or not _is_linear(module):
            continue
        if _is_plain(module):
            n_plain += 1
        else:
            n_quantized += 1
            first_quantized = first_quantized if first_quantized is not None else module
    shown = first_quantized if first_quantized is not None else _first_linear(model, head)
    weight = getattr(shown, "weight", None) if shown is not None else None
    weight_type = type(getattr(weight, "data", weight)) if weight is not None else None
    return KernelInfo(
        backend=backend,
        kernel=kernel,
        requested=requested,
        linear_class=_qualname(type(shown)) if shown is not None else "",
        weight_class=_qualname(weight_type) if weight_type is not None and _is_subclass_tensor(weight) else "",
        quantized_layers=n_quantized,
        plain_layers=n_plain,
        library_kernel=_library_kernel(type(shown)) if shown is not None else "",
        unpacked=quantized and n_quantized == 0 and n_plain > 0,
        dtype=str(getattr(model, "dtype", "")).replace("torch.", ""),
        fallbacks=list(fallbacks or []),
    )


def unpacked_note(info: KernelInfo) -> str:
    """The record's note for a quantized checkpoint the in-process engine runs unpacked."""
    return (f"the in-process engine runs this checkpoint unpacked: its linear layers are plain torch.nn.Linear in "
            f"{info.dtype or 'the load dtype'} (kernel {info.kernel}), so its weights take that much memory; "
            "a server with a packed kernel for this format (such as vLLM) keeps them packed")


def _is_linear(module: Any) -> bool:
    import torch

    return isinstance(module, torch.nn.Linear) or type(module).__name__.endswith("Linear")


def _is_plain(module: Any) -> bool:
    """A torch.nn.Linear itself (not a subclass) holding an ordinary floating-point weight tensor."""
    import torch

    if type(module) is not torch.nn.Linear:
        return False
    weight = getattr(module, "weight", None)
    return weight is not None and not _is_subclass_tensor(weight) and weight.dtype.is_floating_point


def _is_subclass_tensor(weight: Any) -> bool:
    """A tensor subclass holding quantized data (torchao); gptqmodel's weight metadata is no tensor."""
    import torch

    data = getattr(weight, "data", weight)
    return isinstance(data, torch.Tensor) and type(data) not in (torch.Tensor, torch.nn.Parameter)


def _output_head(model: Any) -> Any:
    try:
        return model.get_output_embeddings()  # the LM head: never quantized by these backends
    except (AttributeError, NotImplementedError):
        return None


def _first_linear(model: Any, head: Any) -> Any:
    return next((m for m in model.modules() if m is not head and _is_linear(m)), None)


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _library_kernel(cls: type) -> str:
    """gptqmodel's backend name(s) for one of its QuantLinear classes ("" for other libraries)."""
    if not cls.__module__.startswith("gptqmodel."):
        return ""
    try:
        from gptqmodel.utils.importer import get_kernel_backends

        return ", ".join(b.value for b in get_kernel_backends(cls))
    except Exception:  # an internal helper of gptqmodel: its absence must not fail a variant
        return getattr(cls, "QUANT_TYPE", "") or cls.__name__
