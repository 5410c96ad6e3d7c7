"""The All variants table's prepare-peak and quantize-time cells say what happened to each variant's
checkpoint in the sweep: quantized in it (with its time), read from the cache (with the time it took
when it was made, marked), or never built (a variant the search did not need). Issue 50, point 3: a
not-needed variant read "cached", and a quantization made in the very sweep "11 min 17 s (cached)"."""

from __future__ import annotations

from selector.records import MemoryResult, PeakMemory, QuantInfo, RunRecord
from selector.report import view
from selector.trackers.naming import record_params
from selector.verdicts import Selection, Verdict
from tests.factories import run_record, task_result

GB = 10**9


def _quant(seconds: float, cached: bool) -> QuantInfo:
    return QuantInfo(method="gptq", library="gptqmodel", library_version="0", cached=cached, quantize_s=seconds)


def _loaded(precision: str, *, prepare_gb: float | None, quant: QuantInfo | None = None, preparation: str = "",
            prepared: list[str] | None = None) -> RunRecord:
    memory = MemoryResult(weight_bytes=GB, load=PeakMemory(rss_bytes=2 * GB),
                          prepare=PeakMemory(rss_bytes=int(prepare_gb * GB)) if prepare_gb else None)
    return run_record("m", precision, [task_result("qa", value=0.8, n=50)], params=GB, memory=memory, quant=quant,
                      preparation=preparation, config={"prepared": prepared} if prepared else {})


def _cells(records: list[RunRecord]) -> dict[str, tuple[str, str]]:
    """Each variant's (prepare peak, quantize time) cells."""
    selection = Selection(policy={"floors": {"qa": 0.5}}, winner="m/gptq-int4", reference="m/bf16", summary="",
                          verdicts=[Verdict(variant=r.name, status="not_needed" if r.status == "not_needed" else
                                            "eligible") for r in records])
    table = view.variant_table(records, selection)
    prep, quant = table.columns.index("prepare peak GB"), table.columns.index("quantize time")
    return {row[0].text: (row[prep].text, row[quant].text) for row in table.rows}


def test_quantized_in_this_sweep_from_the_cache_and_not_built() -> None:
    built = _loaded("gptq-int4", prepare_gb=11.0, quant=_quant(677.0, cached=False), preparation="built",
                    prepared=["artifact m-gptq-int4-abc (quantized)"])
    from_cache = _loaded("gptq-int8", prepare_gb=None, quant=_quant(684.0, cached=True), preparation="cache")
    # its preparation process ran, only to find the artifact there: its peak is no preparation's
    found = _loaded("int8-w8a8", prepare_gb=0.4, quant=_quant(42.0, cached=True), preparation="cache",
                    prepared=["artifact m-int8-w8a8-def (cached)"])
    baseline = _loaded("bf16", prepare_gb=None, preparation="cache")
    skipped = run_record("m", "awq-int4", params=GB, status="not_needed", reason="not needed: m/gptq-int4 ...",
                         preparation="none")
    cells = _cells([built, from_cache, found, baseline, skipped])
    assert cells["m/gptq-int4"] == ("11.0", "11 min 17 s")
    assert cells["m/gptq-int8"] == ("cached", "11 min 24 s (cached)")
    assert cells["m/int8-w8a8"] == ("cached", "42 s (cached)")
    assert cells["m/bf16"] == ("cached", "—")
    assert cells["m/awq-int4"] == ("not built", "not built")
    # and the hover text says which
    assert view.quantize_cell(from_cache).title.startswith("read from the cache")
    assert view.quantize_cell(built).title.startswith("quantized in this sweep")
    assert view.prepare_cell(skipped).title == "never converted, quantized or loaded in this sweep"


def test_older_records_without_the_field_infer_conservatively() -> None:
    # The sweep of the issue: the engine found in the cache what its own preparation process had just
    # quantized, and the record said cached; that process's line tells otherwise.
    winner = _loaded("gptq-int4", prepare_gb=11.0, quant=_quant(677.0, cached=True),
                     prepared=["resolved m (/cache/m)", "artifact m-gptq-int4-abc (quantized)"])
    reused = _loaded("gptq-int8", prepare_gb=None, quant=_quant(684.0, cached=True))
    not_needed = run_record("m", "awq-int4", params=GB, status="not_needed")
    failed = run_record("m", "nf4", params=GB, status="failed", reason="boom")  # where it failed: unknown
    assert [r.preparation for r in (winner, reused, not_needed, failed)] == ["", "", "", ""]
    assert [r.prepared for r in (winner, reused, not_needed, failed)] == ["built", "cache", "none", ""]
    assert not winner.quant_from_cache and reused.quant_from_cache
    cells = _cells([winner, reused, not_needed, failed])
    assert cells["m/gptq-int4"] == ("11.0", "11 min 17 s")
    assert cells["m/gptq-int8"] == ("cached", "11 min 24 s (cached)")
    assert cells["m/awq-int4"] == ("not built", "not built")
    assert cells["m/nf4"] == ("—", "—")
    # a record stored before the field existed still reads
    assert RunRecord.model_validate_json(winner.model_dump_json(exclude={"preparation"})).prepared == "built"


def test_mlflow_params_say_where_the_quantization_came_from() -> None:
    built = _loaded("gptq-int4", prepare_gb=11.0, quant=_quant(677.0, cached=False), preparation="built")
    from_cache = _loaded("gptq-int8", prepare_gb=None, quant=_quant(684.0, cached=True), preparation="cache")
    assert (record_params(built)["preparation"], record_params(built)["quant.cached"]) == ("built", "False")
    assert (record_params(from_cache)["preparation"], record_params(from_cache)["quant.cached"]) == ("cache", "True")
    skipped = run_record("m", "awq-int4", status="not_needed", preparation="none")
    assert record_params(skipped)["preparation"] == "none" and "quant.cached" not in record_params(skipped)
