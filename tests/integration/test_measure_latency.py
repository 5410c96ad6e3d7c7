"""Latency and throughput on the tiny model, through the in-process engine's own `send` (its
dynamic batcher): batch-1 throughput is read off the latency runs (the same prompt and length, timed
once), other batch sizes are sent at once and timed; every timed request generates exactly the
tokens it asks for, end-of-sequence or not."""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from selector.config import LatencyConfig, ThroughputConfig
from selector.measure.latency import fixed_requests, measure_latency, measure_throughput
from tests.factories import inprocess

pytestmark = pytest.mark.fast  # make test-fast


@pytest.fixture(scope="module")
def tiny(tiny_model_dir: Path):  # type: ignore[no-untyped-def]
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return inprocess(AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval(),
                     AutoTokenizer.from_pretrained(tiny_model_dir))


class Counted:
    """The engine, counting the requests sent through its sessions and the batches its batcher ran."""

    def __init__(self, running: Any) -> None:
        self.running, self.sent = running, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.running, name)

    @asynccontextmanager
    async def session(self, batching: Any):  # type: ignore[no-untyped-def]
        async with self.running.session(batching) as channel:
            send = channel.send

            async def counting(request: Any) -> Any:
                self.sent += 1
                return await send(request)

            channel.send = counting
            yield channel


def test_batch_one_throughput_is_the_latency_runs_own(tiny) -> None:  # type: ignore[no-untyped-def]
    latency = measure_latency(tiny, LatencyConfig(warmup=1, repeats=3, prompt_tokens=16, new_tokens=8))
    assert latency.e2e_ms.n == 3 and 0 < latency.ttft_ms.p50 <= latency.e2e_ms.p50 and latency.tpot_ms.p50 > 0
    counted = Counted(tiny)
    points = measure_throughput(counted, ThroughputConfig(batch_sizes=[1, 2], prompt_tokens=16, new_tokens=8,
                                                          repeats=1), latency=latency)
    one, two = points
    assert one.batch_size == 1 and one.wall_s == pytest.approx(latency.e2e_ms.p50 / 1e3)
    assert one.output_tokens_per_s == pytest.approx(8 / one.wall_s)
    assert two.batch_size == 2 and two.output_tokens_per_s == pytest.approx(2 * 8 / two.wall_s)
    assert counted.sent == 2 * 2  # only batch 2 was sent: its warm-up run, then the timed one


def test_another_length_is_sent_at_batch_one_too(tiny) -> None:  # type: ignore[no-untyped-def]
    latency = measure_latency(tiny, LatencyConfig(warmup=1, repeats=2, prompt_tokens=16, new_tokens=8))
    counted = Counted(tiny)
    measure_throughput(counted, ThroughputConfig(batch_sizes=[1], prompt_tokens=16, new_tokens=4, repeats=2),
                       latency=latency)
    assert counted.sent == 1 + 2  # a warm-up run and two timed ones


def test_timed_requests_are_exact_and_batch_together(tiny, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The tiny model ends most answers at once; a timed request still generates every token, from
    a prompt of exactly prompt_tokens ids, and requests sent at once run as one batch."""
    from selector.engines.spec import Batching
    from selector.measure.load_driver import drive_level
    from selector.measure.traffic import on_engine
    from selector.engines.inprocess.batching import BatchingScheduler

    requests = fixed_requests(tiny, 12, 9, 3)
    assert [len(r.token_ids) for r in requests] == [12, 12, 12] and len({tuple(r.token_ids) for r in requests}) == 3
    assert all(r.ignore_eos and r.max_new_tokens == 9 for r in requests)
    batches: list[int] = []
    run = BatchingScheduler._run
    monkeypatch.setattr(BatchingScheduler, "_run", lambda self, batch: (batches.append(len(batch)), run(self, batch)))
    traces = on_engine(tiny, Batching(3, 200.0), lambda ch: drive_level(ch.send, requests, concurrency=3))
    assert batches == [3]
    assert [t.output_tokens for t in traces] == [9, 9, 9] and all(len(t.token_times) == 9 for t in traces)
    assert [t.prompt_tokens for t in traces] == [12, 12, 12]


def test_latency_repeats_until_the_mean_is_known_to_the_precision_asked(tiny) -> None:  # type: ignore[no-untyped-def]
    from selector.measure.latency import precise_enough

    shape = {"warmup": 1, "prompt_tokens": 16, "new_tokens": 4}
    every = Counted(tiny)
    all_of_them = measure_latency(every, LatencyConfig(repeats=4, min_repeats=2, precision=None, **shape))
    assert all_of_them.repeats == all_of_them.e2e_ms.n == 4 and every.sent == 1 + 4
    loose = Counted(tiny)
    stopped = measure_latency(loose, LatencyConfig(repeats=50, min_repeats=3, precision=5.0, **shape))
    # Any three positive timings are within +-500% of their mean (at worst t(0.975, 2) * sd / sqrt(3)
    # = 4.30 means, one slow request and two instant ones), so this stops at min_repeats however busy
    # the machine is; +-99% did not once the suite's other workers made one request 3x the others.
    assert stopped.repeats == stopped.e2e_ms.n == 3 and loose.sent == 1 + 3

    cfg = LatencyConfig(repeats=10, min_repeats=5, precision=0.02)
    steady, noisy = [100.0, 101.0, 99.0, 100.5, 99.5], [100.0, 150.0, 60.0, 120.0, 80.0]
    assert precise_enough(steady, cfg) and not precise_enough(noisy, cfg)
    assert not precise_enough(steady[:4], cfg)  # fewer than min_repeats
    assert not precise_enough(steady, LatencyConfig(repeats=10, min_repeats=5, precision=None))
    # half-width t(0.975, 4) * sd / sqrt(5) = 2.776 * 0.79 / 2.236 = 0.98 ms: within 1%, not 0.5%
    assert precise_enough(steady, LatencyConfig(precision=0.01)) and not precise_enough(steady, LatencyConfig(precision=0.005))
