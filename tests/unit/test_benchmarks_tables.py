"""The result-table logic of benchmarks/ (pure functions; no model, no peer tool)."""

from __future__ import annotations

import pytest

from benchmarks import tables


def _item(i: str, prompt: str, pred: str, score: float, logprobs: list[float] | None = None) -> dict:
    return {"id": i, "prompt": prompt, "prediction": pred, "score": score, "logprobs": logprobs}


def test_compare_task_counts_identical_prompts_and_predictions() -> None:
    ours = [_item("a", "p1", "12", 1.0), _item("b", "p2", "7", 0.0), _item("c", "p3", " x", 0.0)]
    theirs = [_item("a", "p1", "12", 1.0), _item("b", "p2!", "8", 0.0), _item("c", "p3", "x", 0.0)]
    row = tables.compare_task("arith", "numeric", ours, theirs, lmeval_score=1 / 3)
    assert row["n"] == 3
    assert row["same_prompt"] == 2
    assert row["same_prediction"] == 1
    assert row["same_prediction_same_prompt"] == 1
    assert row["selector_score"] == pytest.approx(1 / 3)
    assert [m["id"] for m in row["mismatches"]] == ["b", "c"]
    assert row["mismatches"][0]["same_prompt"] is False
    assert row["mismatches"][1]["whitespace_only"] is True
    assert row["max_logprob_diff"] is None


def test_compare_task_logprob_diff_and_length_mismatch() -> None:
    ours = [_item("a", "p", "pos", 1.0, [-0.5, -2.0]), _item("b", "q", "neg", 1.0, [-3.0, -0.1])]
    theirs = [_item("a", "p", "pos", 1.0, [-0.55, -1.9]), _item("b", "q", "pos", 0.0, [-0.2, -0.3])]
    row = tables.compare_task("sent", "choice_accuracy", ours, theirs, lmeval_score=0.5)
    assert row["max_logprob_diff"] == pytest.approx(2.8)
    assert row["mismatches"][0]["lm_eval_logprobs"] == [-0.2, -0.3]
    with pytest.raises(ValueError, match="selector scored 2 items, lm-eval 1"):
        tables.compare_task("sent", "acc", ours, theirs[:1], 0.5)


def test_agreement_total_shares() -> None:
    rows = [{"n": 10, "same_prompt": 10, "same_prediction": 9, "same_prediction_same_prompt": 9},
            {"n": 10, "same_prompt": 5, "same_prediction": 10, "same_prediction_same_prompt": 5}]
    total = tables.agreement_total(rows)
    assert total["n"] == 20 and total["same_prediction"] == 19
    assert total["same_prediction_share"] == pytest.approx(0.95)
    assert total["same_prediction_share_where_prompt_same"] == pytest.approx(14 / 15)


def test_throughput_uses_medians_and_speedup() -> None:
    t = tables.throughput([10.0, 30.0, 11.0], [20.0, 22.0, 90.0], items=144)
    assert t["selector_wall_s"] == 11.0 and t["lm_eval_wall_s"] == 22.0
    assert t["speedup"] == pytest.approx(2.0)
    assert t["selector_items_per_s"] == pytest.approx(144 / 11)
    md = tables.throughput_markdown(t, batch_size=8)
    assert "**2.00x**" in md and "| selector | 11.00 | 13.09 |" in md


def test_latency_rows_relative_difference_and_tolerance() -> None:
    ours = {1: {"prefill_ms": 105.0, "decode_ms": 300.0, "peak_rss_mb": None}, 8: {"prefill_ms": 50.0}}
    theirs = {1: {"prefill_ms": 100.0, "decode_ms": 250.0, "peak_rss_mb": 800.0}}
    rows = tables.latency_rows(ours, theirs)
    assert [r["batch_size"] for r in rows] == [1, 1, 1]  # batch 8 has no optimum-benchmark figure
    by = {r["figure"]: r for r in rows}
    assert by["prefill_ms"]["diff"] == pytest.approx(0.05) and by["prefill_ms"]["within_tolerance"] is True
    assert by["decode_ms"]["diff"] == pytest.approx(0.2) and by["decode_ms"]["within_tolerance"] is False
    assert by["peak_rss_mb"]["diff"] is None and by["peak_rss_mb"]["within_tolerance"] is None
    assert "| 1 | decode (after the first token) | ms | 300.0 | 250.0 | +20.0% |" in tables.latency_markdown(rows)


def test_markdown_table_escapes_pipes_and_newlines() -> None:
    md = tables.markdown_table(["a", "b"], [["x|y", "line\nbreak"]])
    assert md.splitlines() == ["| a | b |", "|---|---|", "| x\\|y | line\\nbreak |"]


def test_accuracy_markdown_total_row() -> None:
    rows = [tables.compare_task("t", "m", [_item("a", "p", "1", 1.0)], [_item("a", "p", "2", 0.0)], 0.0)]
    rows[0]["style"] = "chat"
    md = tables.accuracy_markdown(rows, tables.agreement_total(rows))
    assert "| t | chat | m | 1 | 1.000 | 0.000 | 1/1 | 0/1 | n/a |" in md
    assert "| **all** |  |  | 1 |  |  | 1/1 | 0/1 (0.0%) |  |" in md


def test_gap_text() -> None:
    assert tables.gap_text({"gap_nats": -0.031, "first_difference_token": 2, "alone_prefers": "lm_eval"}) == (
        "0.031 at output token 3; alone (batch 1) the model picks lm-eval's")
    assert tables.gap_text({"gap_selector_nats": 0.01, "gap_lm_eval_nats": 0.02}) == "selector 0.010, lm-eval 0.020"
    assert tables.gap_text({}) == "n/a"


def test_median_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError):
        tables.median([])


def test_paired_runs_give_the_median_difference_its_range_and_each_tools_drift() -> None:
    assert [tables.ab_order(i) for i in range(3)] == [("vllm_bench", "selector"), ("selector", "vllm_bench"),
                                                       ("vllm_bench", "selector")]
    # The server slowed from 100 to 130 ms over the pairs; selector read 2% above vllm bench each time.
    pairs = [({"ttft_p50": t}, {"ttft_p50": t * 1.02}) for t in (100.0, 110.0, 130.0)]
    got = tables.paired_difference(pairs, "ttft_p50")
    assert got is not None and got["median"] == pytest.approx(0.02) and got["n"] == 3
    assert got["low"] == pytest.approx(0.02) and got["high"] == pytest.approx(0.02) and got["one_side"] and got["within"]
    assert got["drift_theirs"] == pytest.approx(0.3) and got["drift_ours"] == pytest.approx(0.3)
    # One pair caught the server mid-change: the median holds, the range shows it.
    pairs = [({"x": 100.0}, {"x": 101.0}), ({"x": 100.0}, {"x": 140.0}), ({"x": 100.0}, {"x": 97.0})]
    got = tables.paired_difference(pairs, "x")
    assert got["median"] == pytest.approx(0.01) and got["high"] == pytest.approx(0.4) and not got["one_side"]
    assert tables.paired_difference([({"x": None}, {"x": 1.0})], "x") is None
    assert not tables.paired_difference([({"x": 100.0}, {"x": 120.0})], "x")["within"]  # type: ignore[index]
