"""An in-process model's next-token distributions at a probe's last positions (fidelity's input)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def probe_logprobs(model: Any, probes: list[list[int]], positions: int) -> Iterator[Any]:
    """Per probe: float32 log-probabilities [positions, vocab] of an in-process model at its last
    `positions` positions.

    One probe at a time, unpadded: the numbers are exactly those of a single-sequence forward, and
    only one probe's distributions are held at once (a 262k-token vocabulary makes them large).
    """
    import torch

    device = next(model.parameters()).device
    # Only the last positions go through the vocabulary projection (Gemma 3's has 262k rows); a
    # model class without logits_to_keep computes them all and is sliced.
    keep = {"logits_to_keep": positions}
    with torch.inference_mode():
        for ids in probes:
            input_ids = torch.tensor([ids], device=device)
            try:
                logits = model(input_ids=input_ids, **keep).logits
            except TypeError:
                keep = {}
                logits = model(input_ids=input_ids).logits
            yield torch.log_softmax(logits[0, -positions:].float(), dim=-1).cpu()
