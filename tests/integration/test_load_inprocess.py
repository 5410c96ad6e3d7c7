"""The in-process load test on a tiny real Llama: eval-set prompts through the dynamic batching
scheduler, and what the rest of the product does with the levels (MLflow metric names, the load
plots, latency limits in selection)."""

from __future__ import annotations

from typing import Any

import pytest

from selector.compose import compose as _compose
from selector.records import PerfResult, RunRecord
from tests.factories import inprocess, run_record

pytestmark = pytest.mark.fast  # make test-fast



@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from transformers import AutoModelForCausalLM

    from tests.tiny import build_tiny_llama

    path = build_tiny_llama(tmp_path_factory.mktemp("tiny") / "model")
    from transformers import AutoTokenizer

    return inprocess(AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path))


def config(*overrides: str):  # type: ignore[no-untyped-def]
    return _compose(["measure=load-quick", *overrides])  # evalsets/default is found in the package


def tasks_for(cfg):  # type: ignore[no-untyped-def]
    from selector.tasks import load_evalset

    return load_evalset(cfg.evalset.path, cfg.evalset.tasks, 4)


def test_run_inprocess_load_levels(tiny: Any) -> None:
    from selector.measure.traffic import run_load

    cfg = config("+measure.load.slo.e2e_ms=60000")  # a new key in a dict: Hydra wants the +
    levels = run_load(tiny, tasks_for(cfg), cfg)
    assert [lv.concurrency for lv in levels] == [1, 2]
    for lv in levels:
        assert lv.requests == 6 and lv.errors == 0 and lv.rate_rps is None
        assert lv.duration_s > 0 and lv.request_throughput == pytest.approx(6 / lv.duration_s)
        assert lv.output_tokens_per_s > 0
        assert lv.goodput_rps == pytest.approx(lv.request_throughput)  # a generous SLO: every request meets it
        for p in (lv.ttft_ms, lv.e2e_ms, lv.queue_ms, lv.batch_wait_ms, lv.compute_ms):
            assert p is not None and p.n == 6 and 0 <= p.p50 <= p.p90 <= p.p95 <= p.p99
        assert lv.ttft_ms.p50 <= lv.e2e_ms.p50 and lv.ttft_ms.mean <= lv.e2e_ms.mean
        # Every request's three parts add up to its latency, so their means do too.
        assert lv.queue_ms.mean + lv.batch_wait_ms.mean + lv.compute_ms.mean == pytest.approx(lv.e2e_ms.mean, rel=1e-6)
        assert lv.cpu_util_pct is not None and 0 < lv.cpu_util_pct <= 100
        assert lv.gpu_util_pct is None  # CPU run: no GPU sampling


def test_queue_delay_trades_batch_wait(tiny: Any) -> None:
    from selector.measure.traffic import load_levels, load_requests

    waits = {}
    for delay in (0.0, 60.0):
        cfg = config("measure.load.concurrency=[1]", f"measure.load.max_queue_delay_ms={delay}")
        requests = load_requests(tasks_for(cfg), "tiny", "chat", 4, 4)
        (outcome,) = load_levels(tiny, requests, cfg.measure.load, warmup=requests[:1])
        waits[delay] = outcome.level.batch_wait_ms
        for t in outcome.traces:
            assert t.queue_ms + t.batch_wait_ms + t.compute_ms == pytest.approx(t.e2e_ms, abs=1e-6)
        assert outcome.harness_cpu_pct < 10  # the driver sleeps while the model computes
    assert waits[0.0].p99 < 10
    assert 59 <= waits[60.0].p50 < 60 + 60  # alone in the queue: waits out the full delay


def test_salted_copies_are_sent_with_the_tokens_prepared_before_the_clock(tiny: Any,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Each level sends salted copies of the requests (fresh prompts): the copies share their
    prompts, so what `prepare` tokenized before the clock is what they send, and nothing is
    tokenized while a level is timed."""
    from selector.measure.traffic import load_levels, load_requests

    cfg = config("measure.load.concurrency=[1,2]")
    requests = load_requests(tasks_for(cfg), "tiny", "chat", 5, 4)
    tiny.prepare(requests)

    def no_tokenizing(prompt: Any) -> list[int]:
        raise AssertionError("tokenized while the clock ran")

    monkeypatch.setattr(tiny.hf, "encode", no_tokenizing)
    outcomes = load_levels(tiny, requests[1:], cfg.measure.load, warmup=requests[:1])
    assert [(o.level.requests, o.level.errors) for o in outcomes] == [(4, 0), (4, 0)]


def test_levels_flow_into_metrics_plots_and_selection(tiny: Any) -> None:
    from selector.measure.traffic import run_load
    from selector.report.plots_load import latency_vs_concurrency, throughput_vs_latency
    from selector.selection.measures import latency_value, parse_latency_key
    from selector.trackers.naming import load_metrics

    cfg = config()
    levels = run_load(tiny, tasks_for(cfg), cfg)
    record = run_record("tiny", "fp32", perf=PerfResult(device="cpu", load=levels))
    record = RunRecord.model_validate_json(record.model_dump_json())  # what a stored record gives back

    metrics = load_metrics(record)
    steps = {(name, step) for name, _, step in metrics}
    assert ("load/e2e_ms_p95", 1) in steps and ("load/e2e_ms_p95", 2) in steps
    assert ("load/queue_ms_p50", 2) in steps and ("load/compute_ms_p99", 1) in steps
    by_key = {(n, s): v for n, v, s in metrics}
    assert by_key[("load/request_throughput", 2)] == pytest.approx(levels[1].request_throughput)

    assert latency_value(record, parse_latency_key("e2e_ms_p95@2")) == pytest.approx(levels[1].e2e_ms.p95)
    assert latency_value(record, parse_latency_key("batch_wait_ms_p50@1")) == pytest.approx(levels[0].batch_wait_ms.p50)
    assert latency_value(record, parse_latency_key("e2e_ms_p95@8")) is None  # a level that was not run

    for plot in (latency_vs_concurrency([record]), throughput_vs_latency([record])):
        assert plot is not None and plot.svg.startswith("<svg") and "tiny/fp32" in plot.svg


def test_each_levels_answers_through_the_batcher_are_compared_with_the_evaluations(tiny: Any) -> None:
    """Answers under load in-process: the requests made from eval items go through the dynamic
    batcher, which cuts each text at the task's stop sequence as the evaluation does; every level's
    answers are compared with the evaluation's, item by item, as counted here from the traces."""
    from statistics import mean

    from selector.measure.answers import AnswerScorer
    from selector.measure.traffic import Probe, ladder, load_batching, on_engine, scoring, variant_requests
    from selector.tasks import evaluate_task

    cfg = config("measure.load.new_tokens=16", "measure.load.concurrency=[1,4]", "measure.load.requests_per_level=8")
    tasks, load = tasks_for(cfg), cfg.measure.load
    at_rest = [s for t in tasks if t.type == "generate" for s in evaluate_task(tiny, t, "tiny", "chat")[1]]
    warmup, requests = variant_requests(tasks, cfg)
    tiny.prepare([*warmup, *requests])
    scorer = AnswerScorer.for_variant(tasks, cfg, at_rest)
    outcomes = on_engine(tiny, load_batching(load),
                         lambda channel: ladder(scoring(Probe(channel, load), scorer), requests, warmup))
    rest = {(s.task, s.id): s for s in at_rest}
    for outcome in outcomes:
        answers, traces = outcome.level.answers, outcome.traces
        assert answers is not None and (answers.requests, answers.failed) == (8, 0)
        assert [t.item for t in traces] == [r.item for r in requests]
        compared = [t for t in traces if t.item.task != "code"]  # code's 160-token answers: cut at 16, not compared
        assert answers.compared == len(compared)
        assert answers.changed == sum(t.text.strip() != rest[(t.item.task, t.item.id)].output.strip() for t in compared)
        assert answers.tasks["code"].compared == 0 and "(max_new_tokens 160)" in answers.tasks["code"].note
        for name in ("arithmetic", "extraction"):
            mine = [t for t in traces if t.item.task == name]
            got = answers.tasks[name]
            assert got.requests == got.compared == got.scored == len(mine)
            items = sorted({t.item.id for t in mine})
            assert got.items == len(items) and got.at_rest == pytest.approx(mean(rest[(name, i)].score for i in items))
