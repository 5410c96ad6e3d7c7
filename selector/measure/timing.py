"""Timed generation: when each token came out of a real `generate` call.

A logits processor runs once per decoding step, right after the forward pass that produced the
step's logits; stamping the clock there (after a device synchronize on CUDA) gives the time to first
token and the gap between tokens without changing what is generated.
"""

from __future__ import annotations

import time
from typing import Any

import torch

FILLER = (
    "The committee met on a rainy Tuesday to review the quarterly plan. Several members raised "
    "questions about the budget for the new library wing, the schedule for road repairs near the "
    "river, and the proposal to extend opening hours at the community pool during the summer. "
)


class _StepClock:
    def __init__(self, sync: bool) -> None:
        self.sync = sync
        self.stamps: list[float] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.sync:
            torch.cuda.synchronize()
        self.stamps.append(time.perf_counter())
        return scores


def synthetic_prompt(tokenizer: Any, n_tokens: int, variant: int = 0) -> list[int]:
    """Exactly n_tokens of ordinary English (rotated by `variant` so batch rows differ)."""
    ids: list[int] = tokenizer(FILLER * (2 + n_tokens // 20), add_special_tokens=False)["input_ids"]
    start = variant % max(1, len(ids) - n_tokens)
    return ids[start : start + n_tokens]


@torch.inference_mode()
def timed_generate(model: Any, input_ids: torch.Tensor, new_tokens: int, pad_id: int,
                   fast: Any = None) -> tuple[float, list[float]]:
    """Generate exactly `new_tokens` greedy tokens; return (start time, per-step timestamps).

    fast: an engines.fast.FastPath to generate through (warm it at this shape first)."""
    sync = input_ids.device.type == "cuda"
    clock = _StepClock(sync)
    generate = fast.generate if fast is not None else model.generate
    if sync:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    generate(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,  # ignore end-of-sequence: every run does the same work
        do_sample=False,
        num_beams=1,
        pad_token_id=pad_id,
        logits_processor=[clock],
    )
    if sync:
        torch.cuda.synchronize()
    clock.stamps.append(time.perf_counter())
    return t0, clock.stamps
