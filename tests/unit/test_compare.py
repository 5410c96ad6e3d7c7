"""Two sweeps compared on hand-built records: config differences, variants matched, each change
against its noise. The command itself: tests/integration/test_cli_commands.py."""

from __future__ import annotations

import math

import pytest

from selector.sweep.comparison import Side, compare_sweeps, config_diff, latency_noise, match_variants, verdict
from selector.report.compare_view import changes_table, headline
from selector.records import LoadLevel, MemoryResult, Percentiles, PerfResult, RunRecord, TaskResult, Variant


def pct(p50: float, p90: float, n: int = 32) -> Percentiles:
    return Percentiles(p50=p50, p90=p90, p95=p90 * 1.05, p99=p90 * 1.1, mean=p50, n=n)


def rec(precision: str = "bf16", *, right: int = 18, e2e: float = 1000.0, rps: float = 2.0,
        setting: dict | None = None, status: str = "completed") -> RunRecord:
    scores = {f"a-{i}": 1.0 if i < right else 0.0 for i in range(20)}
    level = LoadLevel(concurrency=4, requests=32, errors=0, duration_s=16.0, request_throughput=rps,
                      output_tokens_per_s=8 * rps, e2e_ms=pct(e2e, e2e * 1.2))
    return RunRecord(key=f"{precision}-{right}-{e2e}", status=status,  # type: ignore[arg-type]
                     variant=Variant(model="smol", precision=precision, setting=setting or {}),
                     tasks={"arith": TaskResult(task="arith", metric="accuracy", value=right / 20, ci_low=0, ci_high=1,
                                                n=20, item_scores=scores)},
                     perf=PerfResult(device="cpu", load=[level]), memory=MemoryResult(weight_bytes=270_000_000))


def side(label: str, *records: RunRecord, delay: float = 10.0) -> Side:
    config = {"model": {"name": "smol"}, "precision": {"name": "bf16"}, "seed": 0,
              "measure": {"load": {"max_queue_delay_ms": delay, "max_batch_size": 8}}, "compare_to": None}
    return Side(label, list(records), config)


def rows_of(comparison: dict, measure: str) -> dict:
    return next(r for r in comparison["rows"] if r["measure"] == measure)


def test_config_diff_names_only_what_changed() -> None:
    a = side("A", rec()).config
    b = {**side("B", rec(), delay=50).config, "model": {"name": "other"}, "compare_to": "A"}
    assert config_diff(a, b) == [{"key": "measure.load.max_queue_delay_ms", "a": 10.0, "b": 50}]


def test_latency_noise_is_each_runs_own_spread_with_a_relative_floor() -> None:
    a, b = pct(1000, 1256.32, n=32), pct(1000, 1256.32, n=32)  # sigma = 200 ms
    se = 200 * math.sqrt(0.25 / 32) / 0.3989
    assert latency_noise(a, b, "p50") == pytest.approx(1.96 * math.hypot(se, se), rel=1e-3)
    tight = pct(1000, 1001, n=1000)
    assert latency_noise(tight, tight, "p50") == pytest.approx(50.0)  # 5% of A when the runs barely spread
    assert verdict(-80.0, 50.0, higher_is_better=False) == "better"
    assert verdict(30.0, 50.0, higher_is_better=False) == "within noise"
    assert verdict(0.0, None, True) == "same" and verdict(0.2, None, True) == "better"


def test_changes_are_judged_against_noise() -> None:
    # B: same items right, tail 40% slower at c=4, throughput 1% lower (measured once: within 5%).
    comparison = compare_sweeps(side("A", rec()), side("B", rec(e2e=1400, rps=1.98), delay=50))
    assert comparison["variants"] == ["smol/bf16"] and comparison["only_a"] == comparison["only_b"] == []
    assert rows_of(comparison, "accuracy arith")["verdict"] == "same"
    slower = rows_of(comparison, "c=4 e2e p50")
    assert slower["change"] == pytest.approx(400) and slower["verdict"] == "worse"
    assert rows_of(comparison, "c=4 req/s")["verdict"] == "within noise"
    assert rows_of(comparison, "weight memory")["verdict"] == "same"
    assert headline(comparison).startswith("1 config key differs (measure.load.max_queue_delay_ms)")
    moved = changes_table(comparison, only_moved=True)
    assert {row[1].text for row in moved.rows} >= {"c=4 e2e p50", "accuracy arith"}
    assert "c=4 req/s" not in {row[1].text for row in moved.rows}


def test_accuracy_within_the_paired_interval_is_noise_and_beyond_it_is_not() -> None:
    one_flip = compare_sweeps(side("A", rec(right=18)), side("B", rec(right=17)))
    assert rows_of(one_flip, "accuracy arith")["verdict"] == "within noise"
    assert "paired 95% CI over 20 items" in rows_of(one_flip, "accuracy arith")["noise_from"]
    many = compare_sweeps(side("A", rec(right=18)), side("B", rec(right=6)))
    assert rows_of(many, "accuracy arith")["verdict"] == "worse"


def test_variants_match_by_name_then_by_model_and_precision() -> None:
    plain, labelled = rec(), rec(setting={"max_batch_size": 4})
    assert [(a.name, b.name) for a, b in match_variants([plain], [labelled])] == \
        [("smol/bf16", "smol/bf16 [max_batch_size=4]")]
    two = [rec(setting={"max_batch_size": 4}), rec(setting={"max_batch_size": 8})]
    assert match_variants([plain], two) == []  # which of the two is ambiguous
    with pytest.raises(ValueError, match="no completed variant in common: A has smol/bf16; B has smol/int8"):
        compare_sweeps(side("A", plain), side("B", rec("int8")))


def test_a_serving_only_change_uses_single_request_latency_as_the_control() -> None:
    from selector.records import LatencyResult

    def with_single(record: RunRecord, e2e: float) -> RunRecord:
        assert record.perf is not None
        record.perf.latency = LatencyResult(ttft_ms=pct(e2e / 4, e2e / 3), tpot_ms=pct(10, 11),
                                            e2e_ms=pct(e2e, e2e * 1.01, n=10), prompt_tokens=64, output_tokens=16,
                                            repeats=10)
        return record

    # The machine was 30% slower during B: the single-request e2e (which a measure.load change
    # cannot move) went 500 -> 650 ms; the load level's e2e went 1000 -> 1250 ms (+25%): drift.
    a, b = with_single(rec(e2e=1000), 500), with_single(rec(e2e=1250), 650)
    comparison = compare_sweeps(side("A", a), side("B", b, delay=50))
    assert comparison["drift"] == {"smol/bf16": pytest.approx(0.3)}
    assert rows_of(comparison, "e2e (batch 1) p50")["verdict"] == "control"
    assert rows_of(comparison, "c=4 e2e p50")["verdict"] == "within drift"
    assert "within drift (only serving keys changed" in headline(comparison)
    # +60% is more than the machine explains.
    worse = compare_sweeps(side("A", a), side("B", with_single(rec(e2e=1600), 650), delay=50))
    assert rows_of(worse, "c=4 e2e p50")["verdict"] == "worse"
    # A change beyond serving (the seed) leaves no control: the single-request figures may move with it.
    other = side("B", b, delay=50)
    other.config["seed"] = 1
    assert compare_sweeps(side("A", a), other)["drift"] == {}


def test_a_comparison_is_attached_to_the_later_sweeps_mlflow_run(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from mlflow import MlflowClient

    from selector.trackers.comparison import attach_to_run

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    run = client.create_run(client.create_experiment("selector", artifact_location=str(tmp_path / "artifacts")))
    table = tmp_path / "compare.md"
    table.write_text("| variant |\n")
    assert attach_to_run(uri, run.info.run_id, [table], {"selector.compared_with": "A" * 6000}) == run.info.run_id
    assert [a.path for a in client.list_artifacts(run.info.run_id, "compare")] == ["compare/compare.md"]
    assert client.get_run(run.info.run_id).data.tags["selector.compared_with"] == "A" * 5000  # MLflow's tag limit
    assert attach_to_run(uri, "no-such-run", [table], {}) is None  # the comparison on disk stands
