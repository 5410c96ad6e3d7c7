"""The rules that name the layer a load level's time goes to, on hand-built levels, and the
per-level figures they read (the tail split from real traces, the Prometheus source)."""

from __future__ import annotations

import pytest

from selector.trace import RequestTrace
from selector.measure.traffic import summarize_level
from selector.measure.diagnosis import Serving, diagnose, diagnose_ladder, headline, shares
from selector.engines.served import metrics as prometheus
from selector.records import LoadLevel, Percentiles

from selector.engines.inprocess.engine import HfEngineConfig, InProcessEngine
from selector.engines.knobs import served_by


def inprocess(size: int, delay: float) -> Serving:
    """The in-process engine with its dynamic batcher's knobs, as the report builds it from a record."""
    return Serving(InProcessEngine(HfEngineConfig()), {"max_batch_size": size, "max_queue_delay_ms": delay})


INPROC = inprocess(4, 10)


def pct(p50: float, p95: float | None = None, mean: float | None = None, n: int = 16) -> Percentiles:
    p95 = p50 if p95 is None else p95
    return Percentiles(p50=p50, p90=p95, p95=p95, p99=p95, mean=p50 if mean is None else mean, n=n)


def level(concurrency: int | None, tail: dict[str, float] | None = None, *, rate: float | None = None,
          rps: float = 2.0, compute_p50: float = 400.0, errors: int = 0, **parts: Percentiles) -> LoadLevel:
    return LoadLevel(concurrency=concurrency, rate_rps=rate, requests=16, errors=errors, duration_s=8.0,
                     request_throughput=rps, output_tokens_per_s=16 * rps, e2e_ms=parts.pop("e2e", pct(1000)),
                     compute_ms=parts.pop("compute", pct(compute_p50)), tail_ms=tail or {},
                     split_source="scheduler" if tail else parts.pop("source", ""), **parts)


def tail(queue: float, wait: float, compute: float) -> dict[str, float]:
    return {"e2e_ms": queue + wait + compute, "queue_ms": queue, "batch_wait_ms": wait, "compute_ms": compute, "n": 1}


def test_queueing_beyond_the_batch_size_says_raise_it() -> None:
    d = diagnose(level(8, tail(710, 0, 290)), INPROC)
    assert d.dominant == "queue" and d.basis == "e2e p95"
    assert d.shares == pytest.approx({"queue": 0.71, "batch_wait": 0.0, "compute": 0.29})
    assert d.text == ("at concurrency 8, 71% of e2e p95 is queueing: raise max_batch_size (now 4, below the 8 "
                      "requests in flight) or add an instance")


def test_queueing_with_room_in_the_batch_says_add_an_instance() -> None:
    d = diagnose(level(4, tail(600, 10, 390)), inprocess(8, 10))
    assert d.dominant == "queue"
    assert d.advice.startswith("add an instance, since max_batch_size=8 already holds the 4 requests in flight")


def test_a_lone_request_waiting_out_the_delay_says_lower_it() -> None:
    d = diagnose(level(1, tail(0, 100, 50)), inprocess(4, 100))
    assert d.dominant == "batch_wait" and d.shares["batch_wait"] == pytest.approx(2 / 3)
    assert d.text == ("at concurrency 1, 67% of e2e p95 is waiting for a batch to fill: lower max_queue_delay_ms "
                      "(now 100 ms), since batches do not fill at this load (1 in flight, fewer than max_batch_size=4) "
                      "and requests wait out the delay")


def test_compute_that_grows_while_throughput_stays_flat_is_saturation() -> None:
    light = level(1, tail(0, 5, 400), rps=2.0, compute_p50=400)
    heavy = level(8, tail(100, 0, 1900), rps=2.1, compute_p50=1900)
    first, last = diagnose_ladder([light, heavy], INPROC)
    assert first.dominant == "compute" and "grew" not in first.text  # nothing to compare the lightest with
    assert last.dominant == "compute" and last.shares["compute"] == pytest.approx(0.95)
    assert "compute p50 grew 4.8x from concurrency 1 while requests/s stayed at 2.1" in last.text
    assert "no batching knob removes" in last.advice
    growing = level(8, tail(100, 0, 1900), rps=6.0, compute_p50=1900)
    assert "each batch is bigger and slower" in diagnose(growing, INPROC, light).text


def test_no_dominant_layer_lists_the_shares() -> None:
    d = diagnose(level(4, tail(400, 200, 400)), INPROC)
    assert d.dominant is None
    assert d.text == "at concurrency 4, no single layer holds half of e2e p95 (queue 40%, batch wait 20%, compute 40%)"


def test_a_server_split_uses_means_and_names_what_its_histograms_miss() -> None:
    served = level(16, queue_ms=pct(50, mean=100), compute=pct(250, mean=300), e2e=pct(900, mean=1000), source="vllm")
    split, basis = shares(served)
    assert basis == "mean e2e" and split == pytest.approx({"queue": 0.1, "compute": 0.3, "other": 0.6})
    d = diagnose(served, Serving())
    assert d.dominant == "other" and "60% of mean e2e is outside the server's queue and compute" in d.text
    queued = level(16, queue_ms=pct(700, mean=700), compute=pct(250, mean=250), e2e=pct(1000, mean=1000), source="vllm")
    assert "vLLM --max-num-seqs" in diagnose(queued, Serving()).advice
    # vLLM started by the harness: the advice names the knobs a sweep can vary, with their values.
    vllm = Serving(*served_by({"engine": {"kind": "vllm", "vllm": {"max_num_seqs": 4, "instances": 2}}}))
    assert vllm.engine.kind == "vllm" and vllm.knobs == {"max_num_seqs": 4, "max_num_batched_tokens": None, "instances": 2}
    # a record written before engines had kinds of their own reads the same
    old = Serving(*served_by({"engine": {"kind": "openai", "server": "vllm", "vllm": {"max_num_seqs": 4, "instances": 2}}}))
    assert old.engine.kind == "vllm" and old.knobs == vllm.knobs
    assert diagnose(queued, vllm).advice == ("sweep engine.vllm.max_num_seqs (now 4) to run more requests at once, "
                                             "or engine.vllm.instances (now 2) to spread them over servers")


def test_no_split_says_why_and_errors_come_first() -> None:
    bare = level(2, compute=None, errors=3, split_note="the server has no Prometheus /metrics endpoint")
    bare = bare.model_copy(update={"compute_ms": None})
    d = diagnose(bare, Serving())
    assert d.dominant is None and d.basis == ""
    assert d.text == ("at concurrency 2, 3 of 16 requests failed; no split of the time: the server has no Prometheus "
                      "/metrics endpoint")


def test_rate_levels_and_the_headline_is_the_heaviest_concurrency() -> None:
    levels = [level(1, tail(0, 5, 95)), level(4, tail(700, 0, 300)), level(None, tail(10, 5, 85), rate=2.5)]
    assert diagnose(levels[2], INPROC).label == "2.5 req/s"
    top = headline(levels, INPROC)
    assert top is not None and top.label == "concurrency 4" and top.dominant == "queue"
    assert headline([], INPROC) is None
    recorded = level(None, tail(10, 5, 85))  # a request file's recorded arrivals: neither a concurrency nor a rate
    recorded.replay_scale = 0.5
    assert diagnose(recorded, INPROC).label == "the recorded arrivals x0.5"
    assert headline([recorded], INPROC) is not None  # a ladder of only the recorded level has its headline


def test_serving_is_read_from_a_record_config() -> None:
    config = {"engine": {"kind": "hf"}, "measure": {"load": {"max_batch_size": 8, "max_queue_delay_ms": 5.0}}}
    engine, knobs = served_by(config)
    assert engine.kind == "hf" and knobs == {"max_batch_size": 8, "max_queue_delay_ms": 5.0}
    attached, knobs = served_by({"engine": {"kind": "openai"}})
    assert attached.kind == "openai" and knobs == {}
    unknown, knobs = served_by({"engine": {"kind": "tomorrows-engine"}})
    assert unknown is None and knobs == {}  # a record from a newer selector: a server of unknown knobs


def test_the_advice_is_the_engines_own() -> None:
    """The same queued level gets each engine's own knobs: the in-process batcher's, vLLM's, or a
    server's in general (an attached one, a started command, scripted)."""
    queued = level(8, tail(700, 0, 300))
    assert diagnose(queued, inprocess(4, 10)).advice == (
        "raise max_batch_size (now 4, below the 8 requests in flight) or add an instance")
    vllm = Serving(*served_by({"engine": {"kind": "vllm", "vllm": {"max_num_seqs": None}}}))
    assert diagnose(queued, vllm).advice == ("sweep engine.vllm.max_num_seqs (now vLLM's default) to run more requests "
                                             "at once, or engine.vllm.instances (now 1) to spread them over servers")
    for kind in ({"kind": "openai"}, {"kind": "command", "server_command": "x --port {port}"}, {"kind": "scripted"}):
        assert diagnose(queued, Serving(*served_by({"engine": kind}))).advice == (
            "add an instance (a replica), or let the server run more requests at once "
            "(vLLM --max-num-seqs, TGI --max-batch-size)"), kind
    waiting = level(2, tail(0, 100, 50))
    assert diagnose(waiting, inprocess(4, 100)).advice.startswith("lower max_queue_delay_ms (now 100 ms)")
    assert diagnose(waiting, vllm).advice == ("lower the server's own batching delay, if it has one, since batches "
                                              "do not fill at this load")


# ---- the figures the rules read --------------------------------------------------------------
def test_tail_split_averages_the_slowest_requests() -> None:
    traces = []
    for i in range(10):  # e2e 100..1000 ms; the last one queued 600 ms of its 1000
        sent = float(i)
        queue = 0.6 if i == 9 else 0.0
        end = sent + 0.1 * (i + 1)
        traces.append(RequestTrace(sent=sent, end=end, token_times=[end], output_tokens=1, picked=sent + queue,
                                   compute_start=sent + queue))
    lv = summarize_level(traces, 20.0, {}, concurrency=1)
    assert lv.split_source == "scheduler"
    assert lv.tail_ms["n"] == 1 and lv.tail_ms["e2e_ms"] == pytest.approx(1000)
    assert lv.tail_ms["queue_ms"] == pytest.approx(600) and lv.tail_ms["compute_ms"] == pytest.approx(400)
    assert lv.tail_ms["batch_wait_ms"] == pytest.approx(0)
    http = [RequestTrace(sent=0.0, end=0.5, token_times=[0.1, 0.5], output_tokens=2)]
    served = summarize_level(http, 0.5, {}, concurrency=1)
    assert served.tail_ms == {} and served.split_source == ""


def test_prometheus_split_source_names_the_server_or_why_not() -> None:
    vllm = prometheus.parse_histograms(
        "# TYPE vllm:request_queue_time_seconds histogram\n"
        'vllm:request_queue_time_seconds_bucket{le="0.1"} 1\nvllm:request_queue_time_seconds_bucket{le="+Inf"} 2\n'
        "vllm:request_queue_time_seconds_count 2\nvllm:request_queue_time_seconds_sum 0.3\n")
    assert prometheus.split_source(vllm) == ("vllm", "")
    source, note = prometheus.split_source(None)
    assert source == "" and "no Prometheus /metrics endpoint" in note
    source, note = prometheus.split_source({})
    assert source == "" and "vllm:request_queue_time_seconds" in note


def test_a_notable_queue_beside_dominant_compute_is_named_with_its_knob() -> None:
    d = diagnose(level(2, tail(48, 0, 52)), inprocess(1, 10))
    assert d.dominant == "compute"
    assert d.text.endswith("; and 48% is queueing: raise max_batch_size (now 1, below the 2 requests in flight) "
                           "or add an instance")
    assert "; and" not in diagnose(level(2, tail(20, 0, 80)), inprocess(1, 10)).text
