"""Group size choice: the largest power of two <= the configured size that divides every layer."""

from __future__ import annotations

import pytest

from selector.precisions.groups import LinearShape, awq_clip_misfits, pick_group_size


@pytest.mark.parametrize(
    ("widths", "requested", "expected"),
    [
        ((576, 1536), 128, 64),  # SmolLM2-135M: hidden 576 is 9 x 64
        ((96, 192), 128, 32),  # hidden 96: 64 does not divide 96, 32 does
        ((640, 2048, 1024), 128, 128),  # Gemma 3 270M (640 = 5 x 128)
        ((1536, 8960), 128, 128),  # Qwen2.5-1.5B
        ((4096, 11008), 128, 128),
        ((96,), 96, 96),  # a non-power-of-two request that fits is kept
        ((192, 64), 96, 64),  # ... and one that does not falls to the powers of two below it
        ((100, 200), 128, -1),  # nothing >= 16 divides 100: one group per row
        ((576,), -1, -1),  # per-channel requested
        ((576,), 0, 0),
        ((), 128, 128),
    ],
)
def test_pick_group_size(widths: tuple[int, ...], requested: int, expected: int) -> None:
    got = pick_group_size(widths, requested)
    assert got == expected
    if got > 0:
        assert all(w % got == 0 for w in widths) and got <= requested


def test_awq_clip_misfits_skips_query_and_key() -> None:
    shapes = [
        LinearShape("model.layers.0.self_attn.q_proj", 96, 96),
        LinearShape("model.layers.0.self_attn.k_proj", 96, 48),  # not clipped by gptqmodel: fine
        LinearShape("model.layers.0.self_attn.v_proj", 96, 48),
        LinearShape("model.layers.0.mlp.down_proj", 192, 96),
        LinearShape("model.layers.0.mlp.up_proj", 96, 192),
    ]
    assert [s.name.split(".")[-1] for s in awq_clip_misfits(shapes)] == ["v_proj", "down_proj"]
