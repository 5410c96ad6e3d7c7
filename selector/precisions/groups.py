"""Which layers a weight quantizer will touch, and the group size they all accept.

Group-wise quantizers need every quantized layer's input width to be a multiple of the group size.
SmolLM2 (hidden 576) is not a multiple of 128, so the usual group size 128 is refused by
llmcompressor and rejected by gptqmodel's fast kernels. We pick the largest power of two no larger
than the configured size that divides every quantized `in_features` (576 -> 64), and record it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

MIN_GROUP_SIZE = 16  # smaller groups cost more scale storage than they save error; kernels reject them
AWQ_CLIP_ROWS = 64  # gptqmodel's AWQ clip search walks output rows in blocks of 64 (or 256)
NOT_CLIPPED = ("q_", "k_", "query", "key", "Wqkv")  # gptqmodel skips clipping these (qk product)


@dataclass(frozen=True)
class LinearShape:
    name: str
    in_features: int
    out_features: int


def pick_group_size(in_features: Iterable[int], requested: int) -> int:
    """The largest usable group size <= requested; -1 (one group per row) when none fits.

    `requested` itself is used when it divides every width; otherwise the largest power of two below
    it that does, down to MIN_GROUP_SIZE. `requested <= 0` means per-channel and is returned as is.
    """
    widths = sorted(set(in_features))
    if requested <= 0 or not widths:
        return requested
    if all(w % requested == 0 for w in widths):
        return requested
    size = 1 << (requested.bit_length() - 1)  # largest power of two <= requested
    if size == requested:
        size //= 2
    while size >= MIN_GROUP_SIZE:
        if all(w % size == 0 for w in widths):
            return size
        size //= 2
    return -1


def quantized_linears(resolved: Any, trust_remote_code: bool = False) -> list[LinearShape]:
    """The nn.Linear layers a weight quantizer quantizes (all but the LM head), from the config alone.

    The model is built on the meta device, so no weights are read and nothing is allocated.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from selector.precisions.loading import config_kwargs

    config = AutoConfig.from_pretrained(resolved.path, **config_kwargs(resolved))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    return [
        LinearShape(name, module.in_features, module.out_features)
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear) and not name.split(".")[-1] == "lm_head"
    ]


def awq_clip_misfits(linears: Iterable[LinearShape]) -> list[LinearShape]:
    """Layers gptqmodel's AWQ clip search would assert on (out_features not a multiple of 64)."""
    return [
        s for s in linears
        if not any(tag in s.name.split(".")[-1] for tag in NOT_CLIPPED) and s.out_features % AWQ_CLIP_ROWS
    ]
