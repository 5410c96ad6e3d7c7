"""The report's view model: ordering, Pareto fronts, the variant table's cells, caveats."""

from __future__ import annotations

import pytest

from selector.report import fmt, sections, statistics_view, view
from tests.fixtures.sample_report import sample_sweep
from selector.records import ErrorInfo, RunRecord
from selector.verdicts import Check, Selection, Verdict
from tests.factories import perf, run_record, task_result


def _record(model: str, precision: str, params: int, weight: int | None, acc: float | None,
            status: str = "completed", notes: str = "", device: str = "cpu") -> RunRecord:
    """A variant scored on one task, qa, with an interval of -10/+8 points around its accuracy."""
    tasks = [] if acc is None else [task_result("qa", value=acc, n=50, ci=(acc - 0.1, min(1.0, acc + 0.08)),
                                                metric="exact_match")]
    failed = status == "failed"
    return run_record(model, precision, tasks, params=params, status=status, weight_bytes=weight or None,
                      perf=perf(device, e2e_ms=320.0, ttft_ms=40.0, tpot_ms=9.0),
                      error=ErrorInfo(type="OSError", message="disk full", stage="load") if failed else None,
                      reason="disk full" if failed else "", config={"model": {"name": model, "notes": notes}})


def test_records_ordered_by_size_then_baseline_first() -> None:
    records = [
        _record("big", "int8", 7_000_000_000, 8_000_000_000, 0.9),
        _record("small", "int8", 100_000_000, 120_000_000, 0.5),
        _record("big", "bf16", 7_000_000_000, 14_000_000_000, 0.91),
        _record("small", "gptq", 100_000_000, None, None, status="failed"),
        _record("small", "bf16", 100_000_000, 200_000_000, 0.52),
    ]
    assert [r.name for r in view.order_records(records)] == [
        "small/bf16", "small/int8", "small/gptq", "big/bf16", "big/int8"]


def test_variant_table_cells_mark_failed_floor_checks() -> None:
    records = [_record("m", "bf16", 1_000_000_000, 2_000_000_000, 0.85),
               _record("m", "int4", 1_000_000_000, 700_000_000, 0.55)]
    verdicts = [
        Verdict(variant="m/bf16", status="winner", checks=[Check(name="accuracy:qa", value=0.85, limit=0.6,
                                                                 passed=True)]),
        Verdict(variant="m/int4", status="rejected", reasons=["qa: 55.0% < floor 60%"],
                checks=[Check(name="accuracy:qa", value=0.55, limit=0.6, passed=False, detail="5 points short")]),
    ]
    selection = Selection(policy={"floors": {"qa": 0.6}}, winner="m/bf16", reference="m/bf16",
                          summary="Use m/bf16.", verdicts=verdicts)
    table = view.variant_table(records, selection)
    assert table.columns[:5] == ["variant", "params", "precision", "verdict", "qa (floor 60%)"]
    assert "KL" not in table.columns and "quantize time" not in table.columns  # absent data, no column
    bf16, int4 = table.rows
    assert [c.text for c in bf16[:5]] == ["m/bf16", "1.00B", "bf16", "winner", "85.0% [75.0–93.0]"]
    assert bf16[3].kind == "badge winner"
    assert int4[4].kind == "num below" and int4[4].title == "5 points short"
    assert int4[table.columns.index("weight GB")].text == "0.700"
    assert int4[-1].text == "qa: 55.0% < floor 60%"
    assert table.numeric()[table.columns.index("weight GB")] and not table.numeric()[0]


def test_winner_tiles_compare_with_the_reference() -> None:
    records, selection, _ = sample_sweep()
    summary = view.summary(records, selection)
    tiles = {t["label"]: t for t in summary["tiles"]}
    winner = next(r for r in records if r.name == selection.winner)
    reference = next(r for r in records if r.name == selection.reference)
    share = winner.memory.weight_bytes / reference.memory.weight_bytes  # type: ignore[union-attr]
    assert tiles["weight memory"]["sub"] == f"{share:.0%} of the reference"
    assert tiles["arithmetic"]["value"] == f"{winner.tasks['arithmetic'].value * 100:.1f}%"
    assert tiles["arithmetic"]["sub"].endswith("\nfloor 60%")
    assert summary["counts"] == {"completed": 10, "stopped": 0, "not_needed": 0, "failed": 1, "skipped": 1}


@pytest.mark.parametrize(("notes", "device", "expect_gguf", "expect_cpu"), [
    ("float weights are dequantized from a Q4_1 GGUF", "cpu", True, True),
    ("", "cuda:0", False, False),
])
def test_caveats_follow_model_notes_and_device(notes: str, device: str, expect_gguf: bool,
                                               expect_cpu: bool) -> None:
    records = [_record("m", "bf16", 10, 20, 0.5, notes=notes, device=device)]
    caveats = sections.caveats(records, {})
    assert any(sections.DEQUANTIZED_NOTE in c for c in caveats) is expect_gguf
    assert (sections.CPU_NOTE in caveats) is expect_cpu


def test_paired_table_is_one_row_per_variant_and_absent_without_data() -> None:
    records, selection, _ = sample_sweep()
    table = statistics_view.paired_table(records, selection)
    assert table is not None
    with_pairs = [v for v in selection.verdicts if v.paired]
    assert len(table.rows) == len(with_pairs) == 9
    assert table.columns == ["variant", "sentiment", "extraction", "arithmetic"]
    first = with_pairs[0].paired["arithmetic"]
    cell = table.rows[0][3]
    assert cell.text.startswith(f"{first.diff * 100:+.1f}".replace("-", "−"))
    assert f"{first.flips_to_wrong}↓ {first.flips_to_right}↑" in cell.sub
    bare = selection.model_copy(update={"verdicts": [v.model_copy(update={"paired": {}}) for v in selection.verdicts]})
    assert statistics_view.paired_table(records, bare) is None


def test_failures_list_failed_and_skipped_only() -> None:
    records, _, _ = sample_sweep()
    failures = sections.failures(records)
    assert [(f["variant"], f["status"]) for f in failures] == [
        ("gemma3-270m/fp8", "skipped"), ("qwen2.5-coder-1.5b/awq-w4", "failed")]
    assert failures[0]["stage"] == "" and "CUDA" in failures[0]["message"]
    assert failures[1]["stage"] == "quantize" and failures[1]["type"] == "RuntimeError"
    assert "pin_memory" in failures[1]["log_tail"]


def test_variant_table_shows_answer_flips_against_the_models_own_baseline():
    from selector.report import fmt
    from tests.fixtures.sample_report import sample_sweep
    from selector.report.view import variant_table
    from selector.selection import select
    from selector.config import PolicyConfig

    records, _, _ = sample_sweep()
    selection = select(records, PolicyConfig(floors={"sentiment": 0.8}))
    table = variant_table(records, selection)
    col = table.columns.index("flips vs baseline")
    cells = {row[0].text: row[col].text for row in table.rows}
    quantized = [v for v in selection.verdicts if v.baseline_paired]
    assert quantized, "the sample sweep has quantized variants with a baseline"
    for v in quantized:
        n = sum(d.n for d in v.baseline_paired.values())
        down = sum(d.flips_to_wrong for d in v.baseline_paired.values())
        up = sum(d.flips_to_right for d in v.baseline_paired.values())
        assert cells[v.variant] == f"{fmt.pct((down + up) / n)} (-{down} +{up})"
    for baseline in {v.baseline for v in quantized}:
        assert cells[baseline] == fmt.DASH  # a baseline is not compared with itself


def test_memory_columns_show_the_serving_peak_beside_plans_estimate_and_mark_older_records() -> None:
    from selector.records import MemoryResult, PeakMemory

    gb = 10**9
    new = _record("m", "int4", 1_000_000_000, 700_000_000, 0.8)
    new.memory = MemoryResult(weight_bytes=700_000_000, serving=PeakMemory(rss_bytes=3 * gb),
                              load=PeakMemory(rss_bytes=4 * gb), prepare=PeakMemory(rss_bytes=15 * gb),
                              peak_rss_bytes=4 * gb, planned_serving_bytes=int(2.5 * gb))
    old = _record("m", "bf16", 1_000_000_000, 2_000_000_000, 0.9)
    old.memory = MemoryResult(weight_bytes=2 * gb, peak_rss_bytes=11 * gb)  # a record from before the phases
    selection = Selection(policy={}, winner="m/int4", reference=None, summary="", verdicts=[])
    table = view.variant_table([new, old], selection)
    col = table.columns.index
    by_name = {row[0].text: row for row in table.rows}
    assert by_name["m/int4"][col("serving peak GB")].text == "3.00"
    assert by_name["m/int4"][col("serving peak GB")].title == "serving peak (RSS)"
    assert by_name["m/int4"][col("plan est. GB (measured/plan)")].text == "2.50 (1.20x)"
    assert by_name["m/int4"][col("load peak GB")].text == "4.00"
    assert by_name["m/int4"][col("prepare peak GB")].text == "15.0"
    assert by_name["m/bf16"][col("serving peak GB")].text == "11.0 *"
    assert by_name["m/bf16"][col("serving peak GB")].title.startswith("process peak (older record")
    assert by_name["m/bf16"][col("plan est. GB (measured/plan)")].text == fmt.DASH
    tiles = {t["label"]: t for t in view.key_numbers(new, None, selection)}
    assert tiles["serving peak memory"]["value"] == "3.00 GB" and tiles["serving peak memory"]["sub"] == "serving peak (RSS)"


def test_a_served_variant_shows_its_footprint_and_its_top_k_fidelity_as_such() -> None:
    from selector.records import FidelityResult, MemoryResult, PeakMemory

    gb = 10**9
    served = _record("m", "int4", 1_000_000_000, 120_000_000, 0.8)
    served.memory = MemoryResult(weight_bytes=120_000_000, serving=PeakMemory(rss_bytes=int(3.4 * gb)),
                                 footprint=PeakMemory(rss_bytes=int(5.4 * gb)), kv_pool_bytes=2 * 2**30,
                                 kv_peak_bytes=int(0.12 * gb), weights_source="checkpoint")
    served.fidelity = FidelityResult(baseline="m/bf16", mean_kl=0.127, top1_agreement=0.89, positions=1152,
                                     method="top-20")
    local = _record("m", "int8", 1_000_000_000, 160_000_000, 0.85)
    local.fidelity = FidelityResult(baseline="m/bf16", mean_kl=0.0135, top1_agreement=0.97, positions=1152)
    selection = Selection(policy={}, winner="m/int4", reference=None, summary="", verdicts=[])
    table = view.variant_table([served, local], selection)
    col = table.columns.index
    by_name = {row[0].text: row for row in table.rows}
    peak = by_name["m/int4"][col("serving peak GB")]
    assert peak.text == "3.40" and "footprint 5.40 GB" in peak.title and "KV pool of 2.15 GB" in peak.title
    assert "0.120 GB in use" in peak.title
    assert by_name["m/int4"][col("KL")].text == "≥ 0.127" and "top-20" in by_name["m/int4"][col("KL")].title
    assert by_name["m/int8"][col("KL")].text == "0.0135"


def test_a_served_kl_with_positions_sharing_no_token_with_the_baseline_is_marked() -> None:
    """There the server's top-20 cannot show how far the variant moved: the count is shown, the cell marked."""
    from selector.records import FidelityResult

    near = view.fidelity_cells(FidelityResult(baseline="m/bf16", mean_kl=0.127, top1_agreement=0.89,
                                              positions=1152, method="top-20"))
    far = view.fidelity_cells(FidelityResult(baseline="m/bf16", mean_kl=3.65, top1_agreement=0.0,
                                             positions=1152, method="top-20", disjoint=300))
    assert near[0].text == "≥ 0.127" and "below" not in near[0].kind and "lower bound" in near[0].title
    assert far[0].text == "≥ 3.65 (300/1152 disjoint)" and "below" in far[0].kind
    assert "300 positions" in far[0].title and "none of the baseline's top tokens" in far[0].title
    assert [c.text for c in view.fidelity_cells(None)] == [fmt.DASH, fmt.DASH]


def test_paired_table_flags_by_holm_over_the_whole_table() -> None:
    """Two cells with raw p < 0.05 but only one survives Holm over the table's four tests."""
    from selector.verdicts import PairedDiff

    def d(task: str, p: float, diff: float = -0.1) -> PairedDiff:
        return PairedDiff(task=task, diff=diff, ci_low=diff - 0.05, ci_high=diff + 0.05, n=48, flips_to_wrong=5,
                          flips_to_right=0, mcnemar_p=p, p_value=p)

    records = [run_record("m", p, [task_result("a", [1.0, 0.0]), task_result("b", [1.0, 0.0])]) for p in ("int8", "int4")]
    verdicts = [Verdict(variant="m/int8", status="eligible", paired={"a": d("a", 0.004), "b": d("b", 0.04)}),
                Verdict(variant="m/int4", status="eligible", paired={"a": d("a", 0.5), "b": d("b", 0.9)})]
    selection = Selection(policy={}, winner=None, reference="m/bf16", summary="", verdicts=verdicts)
    table = statistics_view.paired_table(records, selection)
    marked = {(row[0].text, table.columns[i]) for row in table.rows for i, c in enumerate(row) if "below" in c.kind}
    assert marked == {("m/int8", "a")}  # 0.004 x 4 = 0.016 < 0.05; 0.04 x 3 = 0.12 is not
    assert "Holm 0.016" in table.rows[0][1].sub and "Holm-adjusted" in table.note
