"""Selection over hand-built RunRecords: rules, constraints, objectives, verdicts, Pareto,
sensitivity, sample-size advice and warnings."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from selector.config import PolicyConfig
from selector.errors import ConfigError
from selector.selection import pareto_front, parse_latency_key, pick_reference, precision_bits, select
from selector.selection.measures import SERVING_GPU, SERVING_RSS, serving_peak
from selector.records import ErrorInfo, MemoryResult, PeakMemory, RunRecord, TaskResult
from selector.verdicts import Selection
from tests.factories import GB, hits, perf, run_record, task_result


def task(name: str, right: int, n: int, ids: bool = True, offset: int = 0) -> TaskResult:
    return task_result(name, hits(right, n, offset), ids=ids)


def record(
    model: str,
    precision: str,
    params_m: float,
    weight_gb: float | None,
    tasks: dict[str, tuple[int, int]] | None = None,
    *,
    bits: int | None = None,
    e2e_ms: float | None = None,
    load: dict[int, float] | None = None,
    throughput: list[float] | None = None,
    peak_rss_gb: float | None = None,
    cuda_reserved_gb: float | None = None,
    ids: bool = True,
    config: dict | None = None,
    **fields,
) -> RunRecord:
    """In this file's units: params in millions, bytes in GB, tasks as name -> (right, n).
    e2e_ms: single-request e2e p50. load: concurrency -> e2e p50."""
    memory = None
    if weight_gb is not None:
        memory = MemoryResult(
            weight_bytes=int(weight_gb * GB),
            peak_rss_bytes=int(peak_rss_gb * GB) if peak_rss_gb is not None else None,
            cuda_max_reserved_bytes=int(cuda_reserved_gb * GB) if cuda_reserved_gb is not None else None,
        )
    cfg = dict(config or {})
    if bits is not None:
        cfg["precision"] = {"name": precision, "bits": bits}
    timed = e2e_ms is not None or load or throughput
    return run_record(
        model, precision, [task(n, r, total, ids) for n, (r, total) in (tasks or {}).items()],
        params=int(params_m * 1e6), memory=memory, config=cfg,
        perf=perf(e2e_ms=e2e_ms, load=load, throughput=throughput or ()) if timed else None, **fields,
    )


def ladder() -> list[RunRecord]:
    """Three sizes x two precisions; sentiment survives small models, arithmetic needs the large one."""
    return [
        record("large", "bf16", 1500, 3.0, {"sentiment": (96, 100), "arithmetic": (90, 100)}, e2e_ms=900),
        record("large", "int8", 1500, 1.7, {"sentiment": (95, 100), "arithmetic": (88, 100)}, e2e_ms=1300),
        record("medium", "bf16", 270, 0.54, {"sentiment": (93, 100), "arithmetic": (62, 100)}, e2e_ms=300),
        record("medium", "int8", 270, 0.34, {"sentiment": (92, 100), "arithmetic": (45, 100)}, e2e_ms=400),
        record("small", "bf16", 135, 0.27, {"sentiment": (90, 100), "arithmetic": (5, 100)}, e2e_ms=150),
        record("small", "int8", 135, 0.0, status="skipped", reason="bitsandbytes int8 needs CUDA here"),
    ]


FLOORS = {"sentiment": 0.80, "arithmetic": 0.60}


def verdict(selection: Selection, name: str):
    return next(v for v in selection.verdicts if v.variant == name)


# ---- precision order and reference ----


@pytest.mark.parametrize("name, bits, expected", [
    ("fp32", None, 32), ("bf16", None, 16), ("fp16", None, 16), ("int8", None, 8), ("nf4", None, 4),
    ("gptq", None, 4), ("awq-llmc", None, 4), ("w4a16", None, 4), ("gptq-w8", None, 8),
    ("q5_k_m", None, 5), ("mystery", None, 0), ("mystery", 3, 3), ("int8", 4, 4),
])  # fmt: skip
def test_precision_bits(name, bits, expected):
    assert precision_bits(name, bits) == expected


def test_reference_is_largest_model_at_highest_precision():
    records = [
        record("big", "int8", 1000, 1.0, {"t": (5, 10)}),
        record("big", "fp32", 1000, 4.0, {"t": (5, 10)}),
        record("big", "bf16", 1000, 2.0, {"t": (5, 10)}),
        record("small", "fp32", 100, 0.4, {"t": (5, 10)}),
        record("huge", "fp32", 9000, 36.0, status="failed", reason="out of memory"),
    ]
    assert pick_reference(records).name == "big/fp32"
    # bf16 and fp16 rank equal: the tie goes to the name
    tie = [record("m", "fp16", 10, 0.02, {"t": (1, 2)}), record("m", "bf16", 10, 0.02, {"t": (1, 2)})]
    assert pick_reference(tie).name == "m/bf16"
    # bits from the record's precision config beat the name
    named = [record("m", "custom-a", 10, 0.01, {"t": (1, 2)}, bits=8),
             record("m", "custom-b", 10, 0.005, {"t": (1, 2)}, bits=4)]  # fmt: skip
    assert pick_reference(named).name == "m/custom-a"
    # params unknown (0): estimated from weight bytes and bits
    unknown = [record("a", "bf16", 0, 2.0, {"t": (1, 2)}), record("b", "bf16", 0, 1.0, {"t": (1, 2)})]
    assert pick_reference(unknown).name == "a/bf16"
    assert pick_reference([record("x", "bf16", 1, 1.0, status="failed")]) is None


# ---- the three rules ----


def test_point_rule_picks_smallest_meeting_every_floor():
    s = select(ladder(), PolicyConfig(rule="point", floors=FLOORS))
    assert s.winner == "medium/bf16"
    assert s.reference == "large/bf16"
    assert verdict(s, "medium/bf16").status == "winner" and verdict(s, "medium/bf16").rank == 1
    assert verdict(s, "medium/int8").reasons == ["arithmetic: 45.0% < floor 60.0% (15.0 points short)"]
    assert verdict(s, "small/bf16").reasons == ["arithmetic: 5.0% < floor 60.0% (55.0 points short)"]
    assert [verdict(s, n).rank for n in ("large/int8", "large/bf16")] == [2, 3]
    assert verdict(s, "large/int8").reasons == [
        "ranked 2: 1.70 GB weights against 0.54 GB weights for medium/bf16"
    ]
    assert s.summary.startswith(
        "Recommend medium/bf16: the smallest variant (0.54 GB weights) that meets every floor"
    )
    assert "arithmetic 62% [" in s.summary and "3 of 6 variants eligible" in s.summary


def test_lower_bound_rule_demands_the_interval_clear_the_floor():
    point = select(ladder(), PolicyConfig(rule="point", floors=FLOORS))
    bound = select(ladder(), PolicyConfig(rule="lower_bound", floors=FLOORS))
    assert point.winner == "medium/bf16"
    # 62/100: Clopper-Pearson's 95% lower bound (the default ci_method) ~52%, below 60%
    assert bound.winner == "large/int8"
    reason = verdict(bound, "medium/bf16").reasons[0]
    assert reason.startswith("arithmetic: lower bound 51.7% (95% CI) < floor 60.0%")
    check = next(c for c in verdict(bound, "medium/bf16").checks if c.name == "accuracy:arithmetic")
    assert check.rule == "lower_bound" and check.value == pytest.approx(0.5173, abs=1e-3)


def test_lower_bound_follows_policy_confidence():
    loose = select(ladder(), PolicyConfig(rule="lower_bound", floors={"arithmetic": 0.55}, confidence=0.80))
    strict = select(ladder(), PolicyConfig(rule="lower_bound", floors={"arithmetic": 0.55}, confidence=0.99))
    assert loose.winner == "medium/bf16"  # 80% lower bound of 62/100 ~ 55.6%
    assert strict.winner == "large/int8"


def test_non_inferiority_rule_against_the_reference():
    policy = PolicyConfig(rule="non_inferiority", default_margin=0.05)
    s = select(ladder(), policy)
    assert s.reference == "large/bf16"
    ref = verdict(s, "large/bf16")
    assert all(c.passed for c in ref.checks) and ref.paired == {}
    # large/int8 drops 2 points on nested items (2 flips of 100): Tango's 95% interval, -7.0 to
    # +1.8 points, holds 0 as McNemar's p = 0.5 says (the percentile bootstrap's ended at 0.0) and
    # reaches past a 5-point margin, so only the reference itself is shown non-inferior
    assert s.winner == "large/bf16"
    diff = verdict(s, "large/int8").paired["arithmetic"]
    assert diff.diff == pytest.approx(-0.02) and diff.n == 100 and diff.method == "tango"
    assert (diff.flips_to_wrong, diff.flips_to_right) == (2, 0)
    assert diff.mcnemar_p == pytest.approx(0.5) and diff.p == pytest.approx(0.5)
    assert diff.ci_low == pytest.approx(-0.0700, abs=1e-4) and diff.ci_high == pytest.approx(0.0177, abs=1e-4)
    # an 8-point margin: the interval clears it and the exact test agrees (p 0.014 <= 0.025)
    eight = select(ladder(), PolicyConfig(rule="non_inferiority", default_margin=0.08))
    assert eight.winner == "large/int8"
    check = next(c for c in verdict(eight, "large/int8").checks if c.name == "non_inferiority:arithmetic")
    assert check.passed and "tango; exact test p 0.0142" in check.detail
    rejected = verdict(s, "medium/bf16")
    assert rejected.status == "rejected"
    assert any(
        r.startswith("arithmetic: -28.0 points vs large/bf16 (95% CI") and "beyond the 5.0-point margin" in r
        for r in rejected.reasons
    )
    # sentiment -3 points (95% CI reaches about -7): wide margins let medium/bf16 in
    margins = {"arithmetic": 0.40, "sentiment": 0.10}
    wide = select(ladder(), PolicyConfig(rule="non_inferiority", margins=margins))
    assert wide.winner == "medium/bf16"
    assert "vs large/bf16" in wide.summary and "margin" in wide.summary


def test_non_inferiority_keeps_floors_as_point_checks():
    s = select(ladder(), PolicyConfig(rule="non_inferiority", margins={"arithmetic": 0.40, "sentiment": 0.10},
                                      floors={"arithmetic": 0.70}))  # fmt: skip
    assert s.winner == "large/int8"
    assert "arithmetic: 62.0% < floor 70.0% (8.0 points short)" in verdict(s, "medium/bf16").reasons


def test_non_inferiority_without_item_ids_is_unpaired_and_warned():
    records = [
        record("big", "bf16", 1000, 2.0, {"t": (90, 100)}, ids=False),
        record("big", "int8", 1000, 1.0, {"t": (89, 100)}, ids=False),
    ]
    s = select(records, PolicyConfig(rule="non_inferiority", default_margin=0.10))
    v = verdict(s, "big/int8")
    assert v.paired == {}
    check = next(c for c in v.checks if c.name == "non_inferiority:t")
    assert "unpaired" in check.detail and check.passed  # Newcombe low ~ -9.7 points
    assert check.value == pytest.approx(-0.0966, abs=2e-3)
    assert any("no per-item scores" in w for w in s.warnings)


# ---- ties, all-fail, missing metrics, failed and skipped ----


def test_ties_go_to_higher_accuracy_then_name():
    records = [
        record("b", "bf16", 100, 1.0, {"t": (80, 100)}),
        record("a", "bf16", 100, 1.0, {"t": (80, 100)}),
        record("c", "bf16", 100, 1.0, {"t": (85, 100)}),
    ]
    s = select(records, PolicyConfig(floors={"t": 0.5}))
    assert s.winner == "c/bf16"
    assert [verdict(s, n).rank for n in ("c/bf16", "a/bf16", "b/bf16")] == [1, 2, 3]


def test_all_fail_names_the_closest_variant_and_its_miss():
    s = select(ladder(), PolicyConfig(floors={"sentiment": 0.99, "arithmetic": 0.95}))
    assert s.winner is None
    assert s.summary == (
        "No variant meets every floor: the closest, large/bf16, misses arithmetic: 90.0% < floor 95.0% "
        "(5.0 points short); sentiment: 96.0% < floor 99.0% (3.0 points short); 0 of 6 variants eligible."
    )
    assert all(v.status in ("rejected", "skipped") for v in s.verdicts)
    assert s.sample_size == []


def test_failed_and_skipped_keep_status_and_reason():
    records = ladder() + [
        record("huge", "bf16", 7000, None, status="failed",
               error=ErrorInfo(type="OutOfMemoryError", message="CUDA out of memory", stage="load")),
    ]  # fmt: skip
    s = select(records, PolicyConfig(floors=FLOORS))
    assert verdict(s, "small/int8").status == "skipped"
    assert verdict(s, "small/int8").reasons == ["bitsandbytes int8 needs CUDA here"]
    assert verdict(s, "huge/bf16").status == "failed"
    assert verdict(s, "huge/bf16").reasons == ["CUDA out of memory"]
    assert s.reference == "large/bf16"  # a failed larger model is no reference
    assert [v.status for v in s.verdicts][-2:] == ["failed", "skipped"]


def test_nothing_completed():
    records = [record("a", "bf16", 1, 1.0, status="failed", reason="boom"),
               record("b", "int8", 1, 1.0, status="skipped", reason="no CUDA")]  # fmt: skip
    s = select(records, PolicyConfig(floors=FLOORS))
    assert s.winner is None and s.reference is None
    assert s.summary == "No variant completed (1 failed, 1 skipped): nothing to recommend."
    stopped = [r.model_copy(update={"status": "stopped"}) for r in records]  # an adaptive search stopped both
    assert select(stopped, PolicyConfig(floors=FLOORS)).summary == \
        "No variant completed (2 stopped early below a floor): nothing to recommend."


def test_missing_metrics_fail_as_not_measured():
    records = [
        record("a", "bf16", 100, 1.0, {"t": (9, 10)}, load={1: 100.0}),  # no level at concurrency 8
        record("b", "bf16", 100, None, {"t": (9, 10)}, load={8: 100.0}),  # no memory measured
        record("c", "bf16", 100, 1.0, {"other": (9, 10)}, load={8: 100.0}),  # task t missing
    ]
    policy = PolicyConfig(floors={"t": 0.5}, max_weight_gb=5.0, latency_limits={"e2e_ms_p95@8": 1000})
    s = select(records, policy)
    assert s.winner is None
    assert verdict(s, "a/bf16").reasons == ["e2e_ms_p95@8: not measured"]
    assert verdict(s, "b/bf16").reasons == [
        "weight: not measured", "weight memory not measured: cannot rank on objective weight_memory"
    ]
    assert verdict(s, "c/bf16").reasons == ["t: not measured"]
    typo = select(records, PolicyConfig(floors={"tt": 0.5}))
    assert "A floor names 'tt', which no completed variant measured: every variant fails it." in typo.warnings
    check = next(c for c in verdict(s, "a/bf16").checks if c.name == "latency:e2e_ms_p95@8")
    assert check.value is None and not check.passed


# ---- memory and latency constraints ----


def test_weight_budget():
    s = select(ladder(), PolicyConfig(floors={"sentiment": 0.8}, max_weight_gb=2.0))
    assert verdict(s, "large/bf16").reasons == ["weight 3.00 GB > budget 2.00 GB"]
    assert verdict(s, "large/int8").status == "eligible"


def test_an_older_record_is_judged_on_its_process_peak_and_says_so():
    """Records made before the phases were measured apart have one peak: the worker's whole life."""
    records = [
        record("gpu", "bf16", 100, 0.2, {"t": (9, 10)}, peak_rss_gb=1.0, cuda_reserved_gb=6.0),
        record("cpu", "bf16", 100, 0.3, {"t": (9, 10)}, peak_rss_gb=3.0),
    ]
    s = select(records, PolicyConfig(max_memory_gb=4.0))
    assert verdict(s, "gpu/bf16").reasons == ["process peak (older record) 6.00 GB > budget 4.00 GB"]
    assert s.winner == "cpu/bf16"


def with_phases(r: RunRecord, *, serving: float, load: float, prepare: float | None, cuda: bool = False) -> RunRecord:
    def peak(gb: float) -> PeakMemory:
        return PeakMemory(cuda_reserved_bytes=int(gb * GB), cuda_allocated_bytes=int(gb * GB * 0.9),
                          rss_bytes=int(GB)) if cuda else PeakMemory(rss_bytes=int(gb * GB))

    assert r.memory is not None
    r.memory.serving, r.memory.load = peak(serving), peak(load)
    r.memory.prepare = peak(prepare) if prepare is not None else None
    return r


def test_the_memory_limit_judges_the_serving_peak_not_loading_or_preparing():
    """The issue's case: int4 prepared at 15.7 GB (conversion, GPTQ, the bf16 baseline) but served in a few."""
    int4 = with_phases(record("qwen", "gptq-int4", 1630, 0.2, {"t": (9, 10)}, peak_rss_gb=15.7),
                       serving=3.1, load=3.4, prepare=15.7)
    bf16 = with_phases(record("qwen", "bf16", 3550, 0.3, {"t": (9, 10)}, peak_rss_gb=11.3),
                       serving=9.2, load=11.3, prepare=None)
    s = select([int4, bf16], PolicyConfig(max_memory_gb=8.0))
    assert s.winner == "qwen/gptq-int4"
    assert verdict(s, "qwen/bf16").reasons == ["serving peak 9.20 GB > budget 8.00 GB"]
    check = next(c for c in verdict(s, "qwen/gptq-int4").checks if c.name == "max_memory_gb")
    assert check.passed and check.value == pytest.approx(3.1)
    assert serving_peak(int4) == (int(3.1 * GB), SERVING_RSS)


def test_on_a_gpu_the_serving_peak_is_reserved_vram():
    gpu = with_phases(record("m", "bf16", 100, 0.2, {"t": (9, 10)}), serving=6.0, load=7.0, prepare=20.0, cuda=True)
    assert serving_peak(gpu) == (int(6.0 * GB), SERVING_GPU)
    assert select([gpu], PolicyConfig(max_memory_gb=6.5)).winner == "m/bf16"
    assert verdict(select([gpu], PolicyConfig(max_memory_gb=5.5)), "m/bf16").reasons == [
        "serving peak 6.00 GB > budget 5.50 GB"]


def test_latency_limits_from_load_levels_and_single_requests():
    records = [
        record("fast", "bf16", 100, 1.0, {"t": (9, 10)}, e2e_ms=100, load={8: 600.0}),
        record("slow", "bf16", 100, 0.5, {"t": (9, 10)}, e2e_ms=300, load={8: 1600.0}),
    ]
    at_8 = select(records, PolicyConfig(latency_limits={"e2e_ms_p95@8": 2000}))  # p95 = 1.5 x p50
    assert at_8.winner == "fast/bf16"
    assert verdict(at_8, "slow/bf16").reasons == ["e2e_ms_p95@8 2400 ms > limit 2000 ms"]
    single = select(records, PolicyConfig(latency_limits={"ttft_ms_p50": 50}))  # ttft = e2e / 4
    assert single.winner == "fast/bf16"
    assert verdict(single, "slow/bf16").reasons == ["ttft_ms_p50 75 ms > limit 50 ms"]
    loose = select(records, PolicyConfig(latency_limits={"e2e_ms_p50": 1000}))
    assert loose.winner == "slow/bf16"


def test_latency_key_parsing():
    assert parse_latency_key("e2e_ms_p95@8").concurrency == 8
    assert parse_latency_key("ttft_ms_p50").concurrency is None
    assert parse_latency_key("e2e_ms_p99@2.5rps").rate_rps == 2.5
    for bad in ("e2e_p95", "itl_ms_p50", "e2e_ms_p42@8", "e2e_ms_p95@2.5", "foo_ms_p50@4"):
        with pytest.raises(ConfigError, match="latency_limits"):
            parse_latency_key(bad)


# ---- objectives ----


def test_latency_objective_ranks_by_single_request_e2e_p50():
    s = select(ladder(), PolicyConfig(floors=FLOORS, objective="latency"))
    assert s.winner == "medium/bf16"  # 300 ms beats large/bf16's 900 ms
    assert verdict(s, "large/bf16").objective == 900
    assert "the fastest variant (300 ms e2e p50)" in s.summary


def test_cost_objective_uses_best_measured_throughput():
    records = [
        record("a", "bf16", 100, 1.0, {"t": (9, 10)}, throughput=[50.0, 200.0]),
        record("b", "bf16", 100, 0.5, {"t": (9, 10)}, throughput=[100.0], load={4: 10.0}),  # load: 400 tok/s
        record("c", "bf16", 100, 0.2, {"t": (9, 10)}),  # no throughput measured
    ]
    s = select(records, PolicyConfig(objective="cost", price_per_hour=3.6))
    assert verdict(s, "a/bf16").objective == pytest.approx(3.6 / (3600 * 200) * 1e6)  # $5.00
    assert verdict(s, "b/bf16").objective == pytest.approx(2.5)
    assert s.winner == "b/bf16"
    assert verdict(s, "c/bf16").status == "rejected"
    assert "$2.50 per million output tokens" in s.summary
    with pytest.raises(ConfigError, match="price_per_hour"):
        select(records, PolicyConfig(objective="cost"))


# ---- weights ----


def test_weighted_score_is_reported_and_a_weighted_floor_constrains():
    weights = {"sentiment": 1.0, "arithmetic": 3.0}
    s = select(ladder(), PolicyConfig(weights=weights))
    scores = verdict(s, "medium/bf16").scores
    assert scores["weighted"] == pytest.approx((0.93 + 3 * 0.62) / 4)
    assert not any(c.name == "accuracy:weighted" for c in verdict(s, "medium/bf16").checks)
    assert s.winner == "small/bf16"  # reported, not a constraint
    # medium/bf16: (0.93 + 3 x 0.62) / 4 = 0.6975; medium/int8: (0.92 + 3 x 0.45) / 4 = 0.5675
    floored = select(ladder(), PolicyConfig(weights=weights, floors={"weighted": 0.65}))
    assert floored.winner == "medium/bf16"
    [reason] = verdict(floored, "medium/int8").reasons
    assert reason.startswith("weighted: 56.") and "< floor 65.0% (8." in reason
    check = next(c for c in verdict(floored, "medium/int8").checks if c.name == "accuracy:weighted")
    assert check.rule == "point" and not check.passed


# ---- Pareto ----


def test_pareto_front_on_hand_points():
    points = {"a": (0.9, 3.0), "b": (0.8, 1.0), "c": (0.7, 2.0), "d": (0.8, 1.0), "e": (0.95, 5.0)}
    assert pareto_front(points) == ["b", "d", "a", "e"]  # c is dominated by b; b and d tie
    assert pareto_front({}) == []


def test_pareto_fronts_in_selection():
    s = select(ladder(), PolicyConfig(floors=FLOORS))
    # mean accuracy rises with every step up in weight memory (0.475, 0.685, 0.775, 0.915, 0.93)
    assert s.pareto["weight_memory"] == [
        "small/bf16", "medium/int8", "medium/bf16", "large/int8", "large/bf16"
    ]
    # latency: large/int8 (1300 ms, 0.915) is dominated by large/bf16 (900 ms, 0.93)
    assert s.pareto["latency"] == ["small/bf16", "medium/bf16", "large/bf16"]


# ---- sensitivity and sample size ----


def test_sensitivity_rows_show_where_the_winner_moves():
    s = select(ladder(), PolicyConfig(floors=FLOORS))
    rows = {(r["task"], r["delta"]): r for r in s.sensitivity}
    assert set(rows) == {(t, d) for t in ("arithmetic", "sentiment", "all floors") for d in (-0.02, 0.02)}
    assert rows[("arithmetic", 0.02)]["winner"] == "medium/bf16"  # 62% still clears 62%
    assert rows[("arithmetic", 0.02)]["floor"] == pytest.approx(0.62)
    assert rows[("arithmetic", -0.02)]["winner"] == "medium/bf16"
    s2 = select(ladder(), PolicyConfig(floors={"sentiment": 0.8, "arithmetic": 0.61}))
    rows2 = {(r["task"], r["delta"]): r for r in s2.sensitivity}
    assert rows2[("arithmetic", 0.02)]["winner"] == "large/int8" and rows2[("arithmetic", 0.02)]["changed"]
    assert rows2[("all floors", 0.02)]["winner"] == "large/int8"
    fragile = "Fragile: the winner becomes large/int8 if the arithmetic floor moves by +2"
    assert any(w.startswith(fragile) for w in s2.warnings)


def test_sample_size_advice_paired_and_indistinguishable():
    s = select(ladder(), PolicyConfig(floors=FLOORS))
    rows = {r["task"]: r for r in s.sample_size}
    assert {r["versus"] for r in s.sample_size} == {"large/int8"}
    # nested items: medium/bf16 right on a subset of large/int8's; only discordance in one direction
    arith = rows["arithmetic"]
    assert arith["method"] == "paired" and arith["n"] == 100
    assert arith["needed"] is not None and arith["needed"] <= 100
    twins = [record("a", "bf16", 100, 1.0, {"t": (80, 100)}), record("b", "bf16", 100, 2.0, {"t": (80, 100)})]
    row = select(twins, PolicyConfig())
    assert row.sample_size[0]["needed"] is None and row.sample_size[0]["note"].startswith("indistinguishable")


def test_sample_size_two_proportion_without_ids_and_next_smaller_rejected():
    records = [
        record("big", "bf16", 1000, 2.0, {"t": (90, 100)}, ids=False),
        record("small", "bf16", 100, 0.5, {"t": (80, 100)}, ids=False),
    ]
    s = select(records, PolicyConfig(floors={"t": 0.85}))
    assert s.winner == "big/bf16"
    row = s.sample_size[0]
    assert row["versus"] == "small/bf16" and row["method"] == "two-proportion"
    # (1.96 sqrt(2 x .85 x .15) + 0.8416 sqrt(.09 + .16))^2 / .01 = 198.97
    assert row["needed"] == 199


# ---- warnings ----


def test_warnings_small_n_quantized_reference_noise_floor_and_duplicates():
    records = [
        record("big", "int8", 1000, 1.0, {"t": (18, 20)}),
        record("small", "nf4", 100, 0.1, {"t": (13, 20)}),
        record("small", "nf4", 100, 0.1, {"t": (13, 20)}, config={"noise_floor": {"t": 0.02}}),
    ]
    s = select(records, PolicyConfig(floors={"t": 0.66}), noise_floor=None)
    assert s.noise_floor == {"t": 0.02}
    assert "t: only 20 items (fewer than 30): its intervals are wide." in s.warnings
    assert any(w.startswith("The reference big/int8 is quantized (8-bit)") for w in s.warnings)
    assert any(w.startswith("small/nf4: several records") for w in s.warnings)
    # small/nf4 (65%) misses 66% by 1 point, inside the 2-point noise floor
    assert any(w.startswith("small/nf4 misses accuracy:t by 1.0 points") for w in s.warnings)
    overridden = select(records, PolicyConfig(floors={"t": 0.66}), noise_floor={"t": 0.005})
    assert overridden.noise_floor == {"t": 0.005}
    assert not any("noise floor" in w for w in overridden.warnings)


def test_bad_noise_floor_in_a_record_is_a_config_error():
    records = [record("a", "bf16", 1, 1.0, {"t": (1, 2)}, config={"noise_floor": {"t": "big"}})]
    with pytest.raises(ConfigError, match="noise_floor.t"):
        select(records, PolicyConfig())


# ---- policy validation ----


@pytest.mark.parametrize("policy, field", [
    (PolicyConfig(rule="pointy"), "rule"),
    (PolicyConfig(objective="speed"), "objective"),
    (PolicyConfig(ci_method="bayes"), "ci_method"),
    (PolicyConfig(floors={"t": 80.0}), "floors.t"),
    (PolicyConfig(default_floor=1.5), "default_floor"),
    (PolicyConfig(margins={"t": -0.1}), "margins.t"),
    (PolicyConfig(max_weight_gb=0.0), "max_weight_gb"),
    (PolicyConfig(confidence=1.0), "confidence"),
])  # fmt: skip
def test_policy_errors_name_the_field(policy, field):
    with pytest.raises(ConfigError) as err:
        select(ladder(), policy)
    assert err.value.field == field


# ---- determinism, serialization, bootstrap CI method ----


def test_selection_is_deterministic_and_round_trips_as_json():
    policy = PolicyConfig(rule="non_inferiority", floors=FLOORS, ci_method="bootstrap")
    a, b = select(ladder(), policy), select(ladder(), policy)
    assert a.model_dump() == b.model_dump()
    assert Selection.model_validate_json(a.model_dump_json()) == a


def test_default_floor_applies_to_unnamed_tasks():
    s = select(ladder(), PolicyConfig(floors={"sentiment": 0.8}, default_floor=0.6))
    assert s.winner == "medium/bf16"
    assert "accuracy:arithmetic" in {c.name for c in verdict(s, "small/bf16").checks}


# ---- monotonicity: raising a floor never admits a rejected variant ----


@st.composite
def sweeps(draw):
    n = 40
    count = draw(st.integers(2, 5))
    records = []
    for i in range(count):
        right = draw(st.lists(st.integers(0, n), min_size=2, max_size=2))
        offset = draw(st.integers(0, 5))
        tasks = [task_result(name, hits(r, n, offset), metric="acc") for name, r in zip(("a", "b"), right)]
        records.append(run_record(f"m{i}", "bf16", tasks, params=(i + 1) * 10**6, key=str(i),
                                  weight_bytes=draw(st.integers(1, 10)) * GB))
    return records


@pytest.mark.slow  # property-based: many generated cases (the full suite runs it)
@settings(max_examples=80, deadline=None)
@given(
    records=sweeps(),
    rule=st.sampled_from(["point", "lower_bound", "non_inferiority"]),
    floor=st.floats(0.0, 0.98),
    raise_by=st.floats(0.0, 0.3),
    task_name=st.sampled_from(["a", "b"]),
)
def test_raising_a_floor_never_turns_a_rejected_variant_eligible(records, rule, floor, raise_by, task_name):
    low = PolicyConfig(rule=rule, floors={task_name: floor}, default_floor=0.1)
    high = PolicyConfig(rule=rule, floors={task_name: min(1.0, floor + raise_by)}, default_floor=0.1)
    before = select(records, low, n_resamples=200)
    after = select(records, high, n_resamples=200)
    ok_before = {v.variant for v in before.verdicts if v.status in ("winner", "eligible")}
    ok_after = {v.variant for v in after.verdicts if v.status in ("winner", "eligible")}
    assert ok_after <= ok_before
    if before.winner in ok_after:  # the best one still qualifies, so nothing better appeared
        assert after.winner == before.winner
    assert not math.isnan(sum(v.objective or 0 for v in after.verdicts))


def test_lower_is_better_metric_reads_its_floor_as_a_ceiling():
    def with_error_rate(name: str, gb: float, rate_right: int) -> RunRecord:
        r = record(name, "bf16", 100, gb, {"t": (9, 10)})
        err = task_result("err", value=rate_right / 100, n=100, metric="error_rate", higher_is_better=False)
        return r.model_copy(update={"tasks": {**r.tasks, "err": err}})

    records = [with_error_rate("a", 1.0, 5), with_error_rate("b", 0.5, 20)]
    s = select(records, PolicyConfig(floors={"err": 0.10}))
    assert s.winner == "a/bf16"
    assert verdict(s, "b/bf16").reasons == ["err: 20.0% > ceiling 10.0% (10.0 points over)"]


def test_bootstrap_ci_method_falls_back_to_wilson_without_item_scores():
    records = [record("a", "bf16", 100, 1.0, {"t": (30, 40)}, ids=False),
               record("b", "bf16", 10, 0.5, {"t": (30, 40)})]  # fmt: skip
    s = select(records, PolicyConfig(rule="lower_bound", floors={"t": 0.5}, ci_method="bootstrap"))
    fallback = "ci_method=bootstrap needs per-item scores"
    assert any(w.startswith(fallback) and "a/bf16 (t)" in w for w in s.warnings)
    bounds = {v.variant: next(c.value for c in v.checks if c.name == "accuracy:t") for v in s.verdicts}
    assert bounds["a/bf16"] == pytest.approx(0.5987, abs=1e-3)  # Wilson lower bound of 30/40
    assert bounds["b/bf16"] != bounds["a/bf16"]  # bootstrap percentile bound from the item scores


# ---- flips against the same model's baseline precision ----

def test_each_variant_is_paired_with_its_own_models_baseline():
    from selector.trackers.naming import flip_metrics

    def with_items(rec: RunRecord, scores: list[int]) -> RunRecord:
        rec.tasks = {"t": task_result("t", scores)}
        rec.config["baseline_precision"] = "bf16"
        return rec

    base = with_items(record("m", "bf16", 1000, 2.0, bits=16), [1, 1, 1, 0, 0])
    quant = with_items(record("m", "int4", 1000, 0.6, bits=4), [1, 0, 1, 1, 0])
    other = with_items(record("big", "bf16", 9000, 18.0, bits=16), [1, 1, 1, 1, 1])
    s = select([base, quant, other], PolicyConfig())
    v = verdict(s, "m/int4")
    assert v.baseline == "m/bf16"
    diff = v.baseline_paired["t"]
    assert (diff.flips_to_wrong, diff.flips_to_right, diff.n) == (1, 1, 5)
    assert flip_metrics(v) == {"fidelity/flips_to_wrong": 1, "fidelity/flips_to_right": 1, "fidelity/flip_rate": 0.4}
    assert verdict(s, "m/bf16").baseline is None and verdict(s, "big/bf16").baseline is None


# ---- one interval per metric; McNemar only for 0/1 scores (issue 22) ----


def _f1_record(model: str, precision: str, weight_gb: float, scores: list[float]) -> RunRecord:
    result = task_result("qa", scores, metric="f1", ci_method="bootstrap")
    return run_record(model, precision, [result], params=int(weight_gb * 1e9), memory=MemoryResult(weight_bytes=int(weight_gb * GB)))


def test_a_fractional_metric_gets_one_interval_in_the_decision_and_the_report():
    """ci_method=wilson used to give a fractional mean Wilson's interval in the decision while the
    evaluation stored, and the report showed, the bootstrap's; now one rule (stats.mean_interval)
    makes both, kept on the verdict, and the report shows the verdict's."""
    import numpy as np

    from selector.report import fmt
    from selector.stats import bootstrap_interval, wilson_interval

    scores = list(np.round(np.linspace(0.35, 0.95, 48), 3))
    rec = _f1_record("m", "bf16", 1.0, scores)  # stored: the bootstrap's, as an older evaluation wrote it
    for method, (low, high) in (("wilson", wilson_interval(sum(scores), 48, 0.95)),
                                ("bootstrap", bootstrap_interval(scores, 0.95, 2000, 0))):
        s = select([rec], PolicyConfig(rule="lower_bound", floors={"qa": 0.6}, ci_method=method))
        interval = verdict(s, "m/bf16").intervals["qa"]
        assert interval.method == method and (interval.low, interval.high) == pytest.approx((low, high))
        check = next(c for c in verdict(s, "m/bf16").checks if c.name == "accuracy:qa")
        assert check.value == pytest.approx(low)
        assert fmt.accuracy_ci(rec.tasks["qa"], verdict(s, "m/bf16")) == (
            f"{100 * np.mean(scores):.1f}% [{100 * low:.1f}–{100 * high:.1f}]")  # the report shows the same


def test_fractional_paired_differences_get_no_mcnemar():
    ref = _f1_record("big", "bf16", 2.0, [0.9, 0.4, 0.6, 0.55, 0.8, 0.3] * 8)
    var = _f1_record("big", "int8", 1.0, [0.85, 0.45, 0.45, 0.6, 0.8, 0.2] * 8)
    s = select([ref, var], PolicyConfig(rule="non_inferiority", default_margin=0.05))
    diff = verdict(s, "big/int8").paired["qa"]
    assert diff.mcnemar_p is None and diff.test == "wilcoxon" and diff.method == "betting"
    assert diff.diff == pytest.approx(-0.2 / 6)  # -5, +5, -15, +5, 0, -10 points per block of six
    assert diff.ci_low < diff.diff < diff.ci_high and 0 < diff.p_value < 1


@pytest.mark.parametrize("policy, field", [
    (PolicyConfig(confidence=0.5), "confidence"), (PolicyConfig(confidence=1.0), "confidence"),
    (PolicyConfig(default_margin=-0.01), "default_margin"), (PolicyConfig(margins={"t": -0.1}), "margins.t"),
])  # fmt: skip
def test_a_policy_alpha_outside_0_to_half_or_a_negative_margin_is_refused(policy, field):
    from selector.selection.checks import validate_policy

    with pytest.raises(ConfigError) as e:
        validate_policy(policy)
    assert e.value.field == field


# ---- the winner's error: fixed sequence down the size ladder ----


def test_fixed_sequence_claims_only_down_to_the_first_failure():
    """medium/int8 passes its own floor but medium/bf16 above it does not: under fixed_sequence the
    walk (large/bf16, large/int8, medium/bf16 ...) stops at medium/bf16, so large/int8 wins."""
    records = [
        record("large", "bf16", 1500, 3.0, {"t": (46, 48)}),
        record("large", "int8", 1500, 1.7, {"t": (45, 48)}),
        record("medium", "bf16", 270, 0.54, {"t": (30, 48)}),
        record("medium", "int8", 270, 0.34, {"t": (41, 48)}),
    ]
    policy = PolicyConfig(rule="lower_bound", floors={"t": 0.7})
    assert select(records, policy).winner == "medium/int8"  # each variant on its own test
    s = select(records, dataclasses.replace(policy, winner_control="fixed_sequence"))
    assert s.winner == "large/int8"
    blocked = verdict(s, "medium/int8")
    assert blocked.status == "rejected"
    assert any("fixed sequence down the size ladder stopped at the larger medium/bf16" in r for r in blocked.reasons)


def test_fixed_sequence_counts_an_early_stop_as_a_failure_and_skips_what_could_not_run():
    from selector.selection.sequence import ladder, walk

    records = [
        record("large", "bf16", 1500, 3.0, {"t": (46, 48)}),
        record("huge", "bf16", 9000, 18.0, status="skipped", reason="needs CUDA"),
        record("medium", "bf16", 270, 0.54, status="stopped", reason="stopped early"),
        record("small", "bf16", 135, 0.27, {"t": (46, 48)}),
    ]
    assert ladder(records) == ["large/bf16", "medium/bf16", "small/bf16"]
    assert walk(ladder(records), {"large/bf16": True, "small/bf16": True}) == ({"large/bf16"}, "medium/bf16")
    s = select(records, PolicyConfig(rule="lower_bound", floors={"t": 0.7}, winner_control="fixed_sequence"))
    assert s.winner == "large/bf16"


# ---- after an adaptive search: what the analysis cannot know ----


def _searched() -> list[RunRecord]:
    """medium/int8 meets a 70% floor with 36/48; small/bf16 was stopped early; large/bf16 and
    large/int8 were not needed (pruned); medium/bf16 ran in full as evidence."""
    from selector.records import SearchInfo

    return [
        record("large", "bf16", 1500, None, status="not_needed", reason="not needed"),
        record("large", "int8", 1500, None, status="not_needed", reason="not needed", bits=8),
        record("medium", "bf16", 270, 0.54, {"t": (35, 48)}),
        record("medium", "int8", 270, 0.34, {"t": (36, 48)}),
        record("small", "bf16", 100, 0.2, status="stopped", reason="stopped early",
               search=SearchInfo(strategy="adaptive", items_evaluated=24, items_total=48)),
    ]


def test_sensitivity_after_an_adaptive_search_says_what_it_cannot_know():
    s = select(_searched(), PolicyConfig(floors={"t": 0.74}))
    assert s.winner == "medium/int8"  # 36/48 = 75%
    rows = {(r["task"], r["delta"]): r for r in s.sensitivity}
    lower = rows[("t", -0.02)]
    assert lower["winner"] is None and not lower["changed"]
    assert "small/bf16 stopped early and might pass floors 2 points lower" in lower["note"]
    higher = rows[("t", 0.02)]  # 76%: neither medium passes; large ones were never measured
    assert higher["winner"] is None and "large/int8, large/bf16 not measured" in higher["note"]
    assert not any(w.startswith("Fragile") for w in s.warnings)  # no false "the winner becomes none"
    assert any(w.startswith("Sensitivity after an adaptive search") for w in s.warnings)
    # the same variants all measured in full: the rows are known again
    full = [r for r in _searched() if r.status == "completed"]
    assert all("note" not in r for r in select(full, PolicyConfig(floors={"t": 0.74})).sensitivity)


def test_sample_size_advice_says_when_the_runner_up_was_stopped_early():
    """The variant just below the winner was stopped early: the advice against a smaller completed
    one (tiny/bf16) would skip it, so it says it cannot be computed."""
    winner, stopped = _searched()[3], _searched()[4]
    tiny = record("tiny", "bf16", 50, 0.1, {"t": (10, 48)})
    [row] = select([winner, stopped, tiny], PolicyConfig(floors={"t": 0.7})).sample_size
    assert row["needed"] is None and "small/bf16, was stopped early after 24 of 48 items" in row["note"]
    assert select([winner, tiny], PolicyConfig(floors={"t": 0.7})).sample_size[0]["versus"] == "tiny/bf16"
