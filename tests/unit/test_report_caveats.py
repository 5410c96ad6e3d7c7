"""Notes a backend left while loading reach the report's caveats, grouped by note."""

from __future__ import annotations

from selector.report.sections import caveats
from tests.fixtures.sample_report import sample_sweep

NOTE = "group size 128 does not divide every layer; used 64"


def test_loading_notes_become_caveats_naming_their_variants() -> None:
    records, _, context = sample_sweep()
    quantized = [r for r in records if r.quant is not None][:2]
    for r in quantized:
        r.quant.notes = [NOTE, "reused cached artifact abc (quantized in 12 s)"]
    found = [c for c in caveats(records, context) if NOTE in c]
    assert len(found) == 1
    assert all(r.variant.name in found[0] for r in quantized)
    assert not any("reused cached artifact" in c for c in caveats(records, context))


def test_records_without_notes_add_no_caveat() -> None:
    records, _, context = sample_sweep()
    for r in records:
        if r.quant:
            r.quant.notes = []
    assert not any(NOTE in c for c in caveats(records, context))
