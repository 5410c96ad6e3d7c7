"""Latency and throughput on the tiny model: batch-1 throughput is read off the latency runs (the
same prompt and length, timed once), other batch sizes are generated and timed."""

from __future__ import annotations

from pathlib import Path

import pytest

from selector.config import LatencyConfig, ThroughputConfig
from selector.measure.latency import measure_latency, measure_throughput


@pytest.fixture(scope="module")
def tiny(tiny_model_dir: Path):  # type: ignore[no-untyped-def]
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval(), tok


def test_batch_one_throughput_is_the_latency_runs_own(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    latency = measure_latency(model, tok, LatencyConfig(warmup=1, repeats=3, prompt_tokens=16, new_tokens=8))
    calls = []
    points = measure_throughput(model, tok, ThroughputConfig(batch_sizes=[1, 2], prompt_tokens=16, new_tokens=8,
                                                             repeats=1), tick=lambda: calls.append(1), latency=latency)
    one, two = points
    assert one.batch_size == 1 and one.wall_s == pytest.approx(latency.e2e_ms.p50 / 1e3)
    assert one.output_tokens_per_s == pytest.approx(8 / one.wall_s)
    assert two.batch_size == 2 and two.output_tokens_per_s > 0
    assert len(calls) == 1  # only batch 2 was generated and timed


def test_another_length_is_generated_at_batch_one_too(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    latency = measure_latency(model, tok, LatencyConfig(warmup=1, repeats=2, prompt_tokens=16, new_tokens=8))
    calls = []
    measure_throughput(model, tok, ThroughputConfig(batch_sizes=[1], prompt_tokens=16, new_tokens=4, repeats=2),
                       tick=lambda: calls.append(1), latency=latency)
    assert len(calls) == 2
