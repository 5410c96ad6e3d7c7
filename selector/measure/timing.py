"""The prompts latency and throughput are timed on: ordinary English of an exact token count."""

from __future__ import annotations

from typing import Any

FILLER = (
    "The committee met on a rainy Tuesday to review the quarterly plan. Several members raised "
    "questions about the budget for the new library wing, the schedule for road repairs near the "
    "river, and the proposal to extend opening hours at the community pool during the summer. "
)


def synthetic_prompt(tokenizer: Any, n_tokens: int, variant: int = 0) -> list[int]:
    """Exactly n_tokens of ordinary English (rotated by `variant` so batch rows differ)."""
    ids: list[int] = tokenizer(FILLER * (2 + n_tokens // 20), add_special_tokens=False)["input_ids"]
    start = variant % max(1, len(ids) - n_tokens)
    return ids[start : start + n_tokens]
