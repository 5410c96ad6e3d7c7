"""benchmarks/grid_table.py: the README's grid table read off a report's records (no model)."""

from __future__ import annotations

import pytest

from benchmarks import grid_table


def _task(value: float, items: dict[str, float]) -> dict:
    return {"value": value, "n": len(items), "item_scores": items}


def _record(name: str, tasks: dict, baseline: str | None = None, quant: dict | None = None) -> dict:
    model, precision = name.split("/")
    return {"variant": {"model": model, "precision": precision}, "status": "completed", "tasks": tasks, "quant": quant,
            "fidelity": {"baseline": baseline, "mean_kl": 0.1234, "top1_agreement": 0.9} if baseline else None,
            "memory": {"weight_bytes": 270_000_000, "load": {"rss_bytes": 2**30}}}


BF16 = _record("m/bf16", {"a": _task(0.5, {"1": 1, "2": 0, "3": 1, "4": 0}), "b": _task(1.0, {"5": 1, "6": 1})})
GPTQ = _record("m/gptq-int4", {"a": _task(0.75, {"1": 1, "2": 1, "3": 1, "4": 0}), "b": _task(0.5, {"5": 1, "6": 0})},
               baseline="m/bf16", quant={"library": "gptqmodel", "method": "gptq", "quantize_s": 33.6})
INT8 = _record("m/int8", {"a": _task(0.5, {"1": 1, "2": 0, "3": 1, "4": 0})}, baseline="m/bf16",
               quant={"library": "bitsandbytes", "method": "llm_int8", "quantize_s": None})
AWQ = _record("m/awq-int4", {"a": _task(0.25, {"1": 1, "2": 0, "3": 0, "4": 0})}, baseline="m/bf16",
              quant={"library": "llmcompressor", "method": "awq", "quantize_s": 81.2})
BY_NAME = {grid_table.name(r): r for r in (BF16, GPTQ, INT8, AWQ)}


def test_flipped_counts_answers_that_changed_either_way_over_the_items_both_scored() -> None:
    assert grid_table.flipped_share(GPTQ, BF16) == pytest.approx(2 / 6)  # item 2 right now, item 6 wrong now
    assert grid_table.flipped_share(INT8, BF16) == 0.0  # task b not scored: only a's four items count
    assert grid_table.flipped_share(AWQ, BF16) == pytest.approx(1 / 4)


def test_rows_say_how_each_precision_was_quantized_and_which_run_unpacked() -> None:
    tasks = ["a", "b"]
    bf16, gptq, int8, awq = (grid_table.row(r, BY_NAME, tasks) for r in (BF16, GPTQ, INT8, AWQ))
    assert (bf16["quantize"], gptq["quantize"], int8["quantize"], awq["quantize"]) == ("", "34 s", "at load", "81 s")
    assert awq["unpacked"] and not gptq["unpacked"]
    assert gptq["accuracy_pct"] == {"a": 75.0, "b": 50.0} and int8["accuracy_pct"] == {"a": 50.0}
    assert bf16["kl"] is None and gptq["kl"] == 0.1234 and gptq["peaks_gib"] == {"load": 1.0}


def test_the_largest_gain_is_the_best_task_of_any_copy_over_its_own_baseline() -> None:
    gain = grid_table.largest_gain(list(BY_NAME.values()), BY_NAME)
    assert gain == {"points": 25.0, "variant": "m/gptq-int4", "task": "a"}
    assert grid_table.largest_gain([BF16], {"m/bf16": BF16}) is None
