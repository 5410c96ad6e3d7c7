"""Traffic on the tiny real Llama: a request file replayed in-process (sessions in order with their
growing conversation, recorded arrival times), and the capacity search against a served variant:
the vLLM stand-in over HTTP (first come first served, a fixed time per generated token), so the
capacity has a known answer, found on one warm server."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from selector.compose import compose
from selector.measure.steady import ProbeLength
from tests.unit.test_load_capacity import expected_capacity

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny") / "model")


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_request_file_replays_sessions_in_order_and_its_recorded_arrivals(tiny_dir: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from selector.measure.traffic import load_levels, variant_requests
    from tests.factories import inprocess

    rows = [{"prompt": "The food was great.", "arrival_s": 0.0},
            {"prompt": "Where is order 4521?", "session": "a", "arrival_s": 0.1},
            {"prompt": "What is 12 plus 30?", "session": "b", "arrival_s": 0.2},
            {"prompt": "It went to Berlin.", "session": "a", "arrival_s": 0.3},
            {"prompt": "And 40 plus 2?", "session": "b", "arrival_s": 0.4},
            {"prompt": "Thanks, bye.", "session": "a", "arrival_s": 0.5},
            {"prompt": "Alice lives in Paris.", "arrival_s": 1.5, "max_tokens": 3}]
    path = write_jsonl(tmp_path / "requests.jsonl", rows)
    cfg = compose(["measure=load-quick", f"measure.load.requests={path}", "measure.load.concurrency=[2]",
                   "measure.load.new_tokens=6", "measure.load.time_scale=0.5"])
    warmup, requests = variant_requests([], cfg)
    assert len(requests) == 7 and len(warmup) == 1
    running = inprocess(AutoModelForCausalLM.from_pretrained(tiny_dir).eval(), AutoTokenizer.from_pretrained(tiny_dir))
    closed, replay = load_levels(running, requests, cfg.measure.load, warmup=warmup)
    assert closed.level.concurrency == 2 and replay.level.replay_scale == 0.5 and replay.level.rate_rps is None
    for outcome in (closed, replay):
        traces = outcome.traces
        assert all(t.ok for t in traces) and outcome.level.requests == 7
        for session in ("a", "b"):
            turns = [t for r, t in zip(requests, traces) if getattr(r, "session", None) == session]
            for before, after in zip(turns, turns[1:]):
                assert after.sent >= before.end  # the reply came before the next turn went out
                # the conversation so far: the earlier prompt, its reply and the new message
                assert after.prompt_tokens > before.prompt_tokens + before.output_tokens
        assert traces[-1].output_tokens <= 3  # the row's own max_tokens
    # Recorded arrivals at time_scale 0.5: nothing goes out before its (halved) time.
    t0 = min(t.sent for t in replay.traces)
    for row, trace in zip(rows, replay.traces):
        assert trace.sent - t0 >= row["arrival_s"] * 0.5 - 0.02
    assert replay.traces[-1].sent - t0 == pytest.approx(0.75, abs=0.25)


@pytest.fixture(scope="module")
def slow_server(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The vLLM stand-in taking 20 ms per generated token, one request at a time."""
    from selector.engines import engine_for
    from selector.engines.spec import StartContext

    # a server command (engine kind command): engine=vllm starts real vLLM
    job = tmp_path_factory.mktemp("job")
    cfg = compose(["engine=openai-transformers", "engine.served_model=variant", "engine.ready_timeout_s=180",
                   "model=path", f"model.path={tiny_dir}", "precision=fp32", "threads=1", f"cache_dir={job / 'cache'}"])
    cfg.engine.server_command = (f"{sys.executable} {ROOT / 'tests' / 'vllm_standin.py'} serve {{model_path}} "
                                 "--host {host} --port {port} --dtype {dtype} --served-model-name {served_model} "
                                 "--token-delay-ms 20 --disable-uvicorn-access-log")
    with engine_for(cfg.engine).start(StartContext(cfg, "cpu", job)) as served:
        yield served


@pytest.mark.slow
def test_capacity_search_on_a_served_variant_with_a_known_service_time(slow_server: Any, tmp_path: Path) -> None:
    from selector.measure.traffic import run_capacity

    # One prompt: every request costs the same (greedy decoding, 4 tokens of 20 ms: about 90 ms with the model).
    path = write_jsonl(tmp_path / "one.jsonl", [{"prompt": "What is 12 plus 30?", "max_tokens": 4}])
    cfg = compose(["measure=load-quick", f"measure.load.requests={path}", "measure.load.capacity=true",
                   "measure.load.slo.e2e_ms_p80=300", "measure.load.capacity_confidence=0.8",
                   "measure.load.capacity_probe_requests=16", "measure.load.capacity_start_rps=2",
                   "measure.load.capacity_repeats=2", "measure.load.max_duration_s=60", "measure.load.confirm_s=3"])
    result = run_capacity(slow_server, [], cfg)["rate"]
    rates = [s.rate_rps for s in result.steps]
    length = ProbeLength.of(cfg.measure.load)  # 0.5 s of warm-up, then 2 s (or 16 requests) judged
    assert rates[0] == 2.0 and all(s.level.requests == length.requests_at(s.at) for s in result.steps if not s.stopped)
    assert result.capacity_rps is not None and result.failed_rps is not None, (rates, result.note)
    assert len(result.runs) == 2 and {s.repeat for s in result.steps} == {0, 1}
    assert result.low is not None and result.low < result.capacity_rps < result.high  # type: ignore[operator]
    # The server's own clock (vLLM's histograms, scraped around the probe) says how long a request
    # held the FIFO; the rest of e2e (HTTP, streaming) happens outside it, side by side.
    lowest = min(result.steps, key=lambda s: s.rate_rps).level
    assert lowest.compute_ms is not None and lowest.e2e_ms is not None and lowest.output_tokens_per_s > 0
    service_s = lowest.compute_ms.mean / 1e3
    outside_ms = lowest.e2e_ms.p50 - lowest.compute_ms.mean - (lowest.queue_ms.mean if lowest.queue_ms else 0.0)
    assert 0.08 <= service_s < 0.3, (service_s, outside_ms)  # 4 tokens of 20 ms, and the model
    # a FIFO server cannot hold more than its fastest service allows (4 x 20 ms of sleeps, at the least)
    assert result.capacity_rps < 1 / 0.08 and result.low_rps < 1 / 0.08
    # the plan, tried on the server: 3 s at the lower bound's rate after the warm-up
    confirmed = result.confirmation
    assert confirmed is not None and confirmed.rate_rps == result.low_rps and confirmed.judged_requests > 0
    assert confirmed.held == (confirmed.margin is not None and confirmed.margin <= 0), confirmed
    load = cfg.measure.load
    fifo_only = load.__class__(**{**load.__dict__, "slo": {"e2e_ms_p80": 300 - max(outside_ms, 0.0)}})
    expected = expected_capacity(fifo_only, service_s)
    # The queueing arithmetic on the lowest step's service time, loosely: other work on a shared
    # machine moves the service time between steps (a descheduled server is a slower server), in both
    # directions relative to the step it was read at.
    assert 0.2 * expected <= result.capacity_rps <= 2.0 * expected, (expected, service_s, outside_ms, rates)
    # Every probe went to the one warm server, whose process tree was measured.
    assert result.cpu_util_pct is not None
    assert all(s.level.split_source == "vllm" for s in result.steps)  # /metrics scraped around each probe
    assert all(s.level.prefix_cache_hit_rate is None for s in result.steps)  # the stand-in has no prefix cache


# ---- the whole sweep -------------------------------------------------------------------------
CAPACITY_SWEEP = ("model=tiny", "precision=fp32,bf16", "search=grid", "measure=quick", "measure.latency.enabled=false",
                  "measure.throughput.enabled=false", "measure.fidelity=false", "evalset.tasks=[arithmetic]",
                  "evalset.limit=2", "threads=1", "measure.load.capacity=true",
                  "measure.load.requests=loadsets/sample.jsonl", "measure.load.new_tokens=8",
                  "measure.load.slo.e2e_ms_p50=20000", "measure.load.capacity_confidence=0.5",
                  "measure.load.requests_per_level=6", "measure.load.capacity_start_rps=2",
                  "measure.load.capacity_max_steps=2", "measure.load.capacity_probe_s=1",
                  "measure.load.capacity_warmup_s=0.5", "measure.load.capacity_probe_requests=6",
                  "measure.load.confirm_s=1", "policy.floors.arithmetic=0", "policy.traffic_rps=9",
                  "policy.cost_per_hour=1.5", "policy.objective=cost_at_traffic")


@pytest.mark.slow
def test_a_sweep_finds_capacity_and_recommends_the_cheapest_at_the_traffic(tiny_setup: dict[str, Path]) -> None:
    from tests.sweep_helpers import run_in_process

    result = run_in_process(tiny_setup, *CAPACITY_SWEEP)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    records = [json.loads(p.read_text()) for p in tiny_setup["out"].glob("sweeps/*/tiny/*/record.json")]
    assert sorted(r["variant"]["precision"] for r in records) == ["bf16", "fp32"]
    for r in records:
        cap = r["perf"]["capacity"]
        assert [s["rate_rps"] for s in cap["steps"]] == [2.0, 4.0] and all(s["passed"] for s in cap["steps"])
        assert cap["capacity_rps"] == 4.0 and cap["failed_rps"] is None and "capacity is at least" in cap["note"]
        assert cap["runs"] == [] and cap["low"] is None  # nothing broke the SLO: no crossing to repeat
        assert r["perf"]["load"] == []  # measure=quick: no ladder, only the search
    (report,) = tiny_setup["out"].glob("sweeps/*/report/report.md")
    md = report.read_text().replace("&lt;", "<")
    # confirm_s=1: the plan, 1 s at 4 req/s after the warm-up, held (20 s is far above the tiny model's e2e)
    assert "### Capacity at the SLO" in md and re.search(
        r"holds 4 req/s at p50 e2e <= 20 s on this machine \(held p50 [\d.]+ m?s for 1 s at 4 req/s\); your 9 req/s "
        r"needs 3 of them, about \$3,285 per month", md), md[md.index("## Recommendation"):][:1500]
    assert "### The plan, confirmed" in md
    assert "Capacity at the SLO" in result.stdout and "by rate, confirmation run: held p50" in result.stdout


@pytest.mark.fast
def test_a_bad_request_file_or_slo_key_stops_the_sweep_before_anything_loads(tiny_setup: dict[str, Path]) -> None:
    from tests.integration.test_bad_input import assert_usage_error
    from tests.sweep_helpers import run_in_process as run_selector  # the command line's entry, in this process

    bad = write_jsonl(tiny_setup["base"] / "bad.jsonl", [{"prompt": "a", "max_tokens": 4},
                                                         {"prompt": "b", "max_tokens": -1}])
    result = run_selector(tiny_setup, "model=tiny", "precision=fp32", "measure=load-quick",
                          f"measure.load.requests={bad}")
    assert_usage_error(result, f"{bad}:2: field 'max_tokens': must be a whole number >= 1, got -1")
    result = run_selector(tiny_setup, "model=tiny", "precision=fp32", "measure.load.capacity=true",
                          "measure.load.slo.e2e_p95=4000")
    assert_usage_error(result, "field 'e2e_p95' not a measured figure nor a percentile")
    result = run_selector(tiny_setup, "model=tiny", "precision=fp32", "measure.load.capacity=true",
                          "measure.load.slo.e2e_ms_p95=4000", "measure.load.capacity_repeats=0")
    assert_usage_error(result, "field 'measure.load.capacity_repeats' must be at least 1 run")
    # A trace longer than the tiny Llama's 1024 tokens of context, and one whose timestamps go backwards.
    trace = write_jsonl(tiny_setup["base"] / "trace.jsonl", [
        {"timestamp": 0, "input_length": 300, "output_length": 8, "hash_ids": [1]},
        {"timestamp": 10, "input_length": 1020, "output_length": 8, "hash_ids": [1, 2]}])
    result = run_selector(tiny_setup, "model=tiny", "precision=fp32", "measure=load-quick",
                          f"measure.load.requests={trace}")
    assert_usage_error(result, f"{trace}:2: field 'output_length': input_length 1020 + output_length 8 tokens exceeds "
                               "tiny's context of 1024 tokens")
    backwards = write_jsonl(tiny_setup["base"] / "backwards.jsonl", [
        {"timestamp": 10, "input_length": 30, "output_length": 8}, {"timestamp": 5, "input_length": 30, "output_length": 8}])
    result = run_selector(tiny_setup, "model=tiny", "precision=fp32", "measure=load-quick",
                          f"measure.load.requests={backwards}")
    assert_usage_error(result, f"{backwards}:2: field 'timestamp': goes backwards: 5 ms comes after 10 ms")
    assert not list(tiny_setup["out"].glob("sweeps/*/tiny/*/record.json"))
