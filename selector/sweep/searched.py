"""What an adaptive search did, as the end of the sweep reports it: a record for every variant it
did not measure (with the reason), and the work it saved against the full grid.

The grid's cost is an estimate from the same sweep's own timings: a stopped variant's evaluation
scaled to all its items, and a variant never loaded at the mean cost of the measured variants of
its model (else of all, in proportion to planned weight memory). It is labelled as an estimate.
"""

from __future__ import annotations

from pathlib import Path

from selector.engines.knobs import setting_dir
from selector.records import RunRecord, Variant
from selector.sweep.state import SweepState

PRUNED = "pruned"  # the driver's word; the record's status is "not_needed"


def not_needed_records(state: SweepState, base: Path) -> list[RunRecord]:
    """A record for each variant the search pruned, written to its job folder so that `select
    --from` and the report see it like any other variant."""
    planned = state.planned()
    out = []
    for verdict in state.search.verdicts if state.search else []:
        if verdict.status != PRUNED or verdict.name not in planned:
            continue
        v = planned[verdict.name]
        model, precision = v.model, v.precision
        if not precision:  # a sweep.json from before variants kept their precision apart
            model, precision = v.name.split("/", 1)
        setting = v.setting
        record = RunRecord(key=v.key, variant=Variant(model=model, precision=precision, family=v.family,
                                                      params=v.params, setting=setting),
                           status="not_needed", reason=verdict.reason, config=state.config or {},
                           preparation="none")  # never converted, quantized or loaded
        folder = base / model / precision / (setting_dir(setting) if setting else "")
        record.save(folder / "record.json")
        out.append(record)
    return out


def _cost(record: RunRecord) -> float:
    return sum(v for k, v in record.timings_s.items() if k != "quantize")  # quantize is inside load


def savings(records: list[RunRecord], state: SweepState) -> dict[str, float]:
    """Items and seconds spent against the grid's (estimated) items and seconds."""
    bytes_of = {v.name: v.planned_bytes for v in state.variants}
    measured = [r for r in records if r.status in ("completed", "stopped")]
    total_items = sum(r.search.items_total for r in measured if r.search)
    per_variant_items = total_items / len(measured) if measured else 0.0
    spent = sum(_cost(r) for r in measured)
    full = [r for r in records if r.status == "completed"]
    grid = 0.0
    for r in records:
        if r.status == "completed":
            grid += _cost(r)
        elif r.status == "stopped" and r.search and r.search.items_evaluated:
            evaluate = r.timings_s.get("evaluate", 0.0)
            grid += _cost(r) - evaluate + evaluate * r.search.items_total / r.search.items_evaluated
            same = [f for f in full if f.variant.model == r.variant.model] or full
            if same:  # what a full run adds after evaluation (fidelity, latency)
                grid += sum(f.timings_s.get("fidelity", 0.0) + f.timings_s.get("measure", 0.0) for f in same) / len(same)
        elif r.status == "not_needed":
            same = [f for f in full if f.variant.model == r.variant.model]
            if same:
                grid += sum(_cost(f) for f in same) / len(same)
            elif full:
                per_byte = sum(_cost(f) for f in full) / sum(bytes_of.get(f.name, 1.0) for f in full)
                grid += per_byte * bytes_of.get(r.name, 0.0)
    items_evaluated = sum(r.search.items_evaluated for r in measured if r.search)
    grid_items = total_items + per_variant_items * sum(r.status == "not_needed" for r in records)
    siblings = (state.search.counts or {}).get("siblings_not_needed", 0) if state.search else 0
    return {"items_evaluated": float(items_evaluated), "grid_items": float(grid_items),
            "variants_measured": float(len(measured)), "variants": float(len(records)),
            "spent_s": spent, "grid_estimate_s": grid, "siblings_not_needed": float(siblings)}


def summary_line(savings_: dict[str, float]) -> str:
    s = savings_
    siblings = s.get("siblings_not_needed", 0)
    skipped = (f"; {siblings:.0f} not needed as siblings of a baseline far below a floor (never converted, quantized "
               "or loaded)" if siblings else "")
    return (f"adaptive search: {s['variants_measured']:.0f} of {s['variants']:.0f} variants measured, "
            f"{s['items_evaluated']:.0f} of {s['grid_items']:.0f} items scored{skipped}; variants took "
            f"{s['spent_s'] / 60:.1f} min against about {s['grid_estimate_s'] / 60:.1f} min for the full grid "
            "(estimated from this sweep's own timings)")
