"""engine=openai against a real OpenAI-compatible server: `transformers serve` on a free loopback
port, serving the tiny Llama built here, started from conf/engine/openai-transformers.yaml.

Greedy generation through the server matches the in-process engine token for token; the load test
runs two concurrency levels against it; killing the server mid-level shows up as errors."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from selector.compose import compose as _compose
from selector.config import LoadConfig
from selector.generation import GenerationRequest, LoglikelihoodRequest
from selector.errors import ConfigError

pytest.importorskip("fastapi")
pytest.importorskip("openai")  # transformers serve builds its responses with the openai package's types

CHAT = [GenerationRequest([{"role": "user", "content": f"What is {n} plus 30?"}], 8, ["\n\n"]) for n in (3, 12, 40)]
PLAIN = [GenerationRequest(text, 6, [stop]) for text, stop in
         (("The food was", " was was"), ("Order number 4521 was shipped to", "to to to"), ("def add(a, b):", "\n"))]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny") / "model")


def start(tiny_dir: Path, job_dir: Path) -> Any:
    """The variant (the tiny model at fp32) through engine=openai-transformers: `transformers serve`
    started by the engine on a free loopback port."""
    from selector.engines import engine_for
    from selector.engines.spec import StartContext

    cfg = _compose(["engine=openai-transformers", "engine.ready_timeout_s=180", "engine.batch_size=3", "model=path",
                    f"model.path={tiny_dir}", "precision=fp32", f"cache_dir={job_dir / 'cache'}"])
    return engine_for(cfg.engine).start(StartContext(cfg, "cpu", job_dir))


@pytest.fixture(scope="module")
def served(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with start(tiny_dir, tmp_path_factory.mktemp("job")) as running:
        yield running


def test_greedy_generation_matches_the_in_process_engine(served: Any, tiny_dir: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from selector.engines.inprocess.evaluator import TransformersEvaluator

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    local = TransformersEvaluator(AutoModelForCausalLM.from_pretrained(tiny_dir).eval(), tok)
    unstopped = [GenerationRequest(r.prompt, 8, []) for r in CHAT + PLAIN]
    done: list[int] = []
    remote = served.generate(unstopped, progress=done.append)
    assert sum(done) == 6
    expected = local.generate(unstopped)
    for got, want in zip(remote, expected):
        assert got.text == want.text and got.text
        assert got.output_tokens == want.output_tokens == 8 and got.prompt_tokens == want.prompt_tokens
    # With stop strings the text ends before the stop. (Servers differ on where they look for it:
    # transformers serve also matches a stop that straddles the end of the prompt, so it may stop
    # sooner than the in-process engine; the answer is still the same greedy text, cut earlier.)
    for got, req, full in zip(served.generate(CHAT + PLAIN), CHAT + PLAIN, expected):
        assert full.text.startswith(got.text)
        assert not any(stop in got.text for stop in req.stop)
    assert served.render(CHAT[0].prompt).startswith("[user]\nWhat is 3 plus 30?")


def test_multiple_choice_needs_prompt_logprobs(served: Any) -> None:
    with pytest.raises(ConfigError, match="multiple-choice tasks need a server"):
        served.loglikelihood([LoglikelihoodRequest("The food was", " great")])


def test_load_at_two_concurrency_levels(served: Any) -> None:
    from selector.measure.traffic import load_levels

    requests = [CHAT[i % 3] if i % 2 else PLAIN[i % 3] for i in range(8)]
    cfg = LoadConfig(enabled=True, concurrency=[1, 3], requests_per_level=8, new_tokens=8, slo={"e2e_ms": 60_000})
    outcomes = load_levels(served, requests, cfg, warmup=requests[:1])
    assert [o.level.concurrency for o in outcomes] == [1, 3]
    for o in outcomes:
        lv = o.level
        assert lv.requests == 8 and lv.errors == 0
        assert lv.request_throughput == pytest.approx(8 / lv.duration_s)
        assert lv.goodput_rps == pytest.approx(lv.request_throughput)
        for p in (lv.ttft_ms, lv.itl_ms, lv.e2e_ms):
            assert p is not None and 0 < p.p50 <= p.p90 <= p.p95 <= p.p99
        assert lv.ttft_ms.n == 8 and lv.e2e_ms.n == 8
        assert lv.output_tokens_per_s == pytest.approx(sum(t.output_tokens for t in o.traces) / lv.duration_s)
        for t in o.traces:
            assert t.ttft_ms <= t.e2e_ms and 1 <= t.output_tokens <= 8
        # transformers serve has no Prometheus metrics: no split, and no error for its absence
        assert lv.queue_ms is None and lv.compute_ms is None
        assert lv.cpu_util_pct is not None and lv.cpu_util_pct > 0  # the server's processes, not ours
        assert o.harness_cpu_pct < 25
    # It serves one request at a time: with three in flight, requests wait for each other.
    assert outcomes[1].level.ttft_ms.p90 > outcomes[0].level.ttft_ms.p50


def test_killing_the_server_mid_level_counts_errors(tiny_dir: Path, tmp_path: Path) -> None:
    import asyncio

    from selector.measure.traffic import drive_level, level_duration, summarize_level

    requests = [PLAIN[i % 3] for i in range(16)]
    with start(tiny_dir, tmp_path) as s:
        pgid = s.servers[0].pid

        async def level() -> list[Any]:
            finished = 0
            async with s.client.client() as client:

                async def send(request: GenerationRequest) -> Any:
                    nonlocal finished
                    trace = await s.client.stream(client, request)
                    finished += 1
                    if finished == 3:  # kill the whole server, no grace, with one request in flight
                        os.killpg(pgid, signal.SIGKILL)
                    return trace

                return await drive_level(send, requests, concurrency=2)

        traces = asyncio.run(level())
        # Killed, not stopped: its exit is SIGKILL's (waited for, as a busy machine may not have
        # reaped it yet by the time the rest of the level has failed)
        assert s.servers[0].proc.wait(timeout=30) == -signal.SIGKILL
    lv = summarize_level(traces, level_duration(traces), {})
    assert lv.requests == 16  # the rest are still sent, and fail at once
    assert lv.errors in (12, 13) and lv.requests - lv.errors == lv.e2e_ms.n
    assert sum(t.ok for t in traces[:4]) in (3, 4) and all(not t.ok for t in traces[4:])
    assert any("Connect" in (t.error or "") for t in traces)
