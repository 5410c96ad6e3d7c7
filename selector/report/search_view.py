"""The report's search section: how an adaptive search went (per variant what it saw and why it
stopped), the waves it handed out, and where its item order came from."""

from __future__ import annotations

from typing import Any

from selector.report import fmt
from selector.report.view import Cell, Table
from selector.records import RunRecord


def search(records: list[RunRecord], context: dict[str, Any]) -> dict[str, Any] | None:
    """How an adaptive search went: per variant what it saw and why it stopped where it did, and
    the work it saved against the full grid (None for a grid sweep)."""
    info = context.get("search") or {}
    if info.get("strategy") != "adaptive":
        return None
    saved = info.get("savings") or {}
    table = Table(columns=["variant", "outcome", "items scored", "why"])
    order = {name: i for i, name in enumerate([*info.get("first", []), *info.get("order", [])])}
    searched = {v["name"]: v["reason"] for v in info.get("verdicts", [])}
    for r in sorted(records, key=lambda r: order.get(r.name, len(order))):
        seen = f"{r.search.items_evaluated} of {r.search.items_total}" if r.search else fmt.DASH
        if r.search and r.search.items_reused:
            seen += f" ({r.search.items_reused} kept from an earlier run)"
        why = r.reason
        if r.status == "completed":
            why = "every item; " + searched.get(r.name, "judged on the full set")
        table.rows.append([Cell(r.name, "name"), Cell(r.status.replace("_", " "), f"badge {r.status}"),
                           Cell(seen, "num"), Cell(why.removeprefix("stopped early: "), "")])
    table.note = ("Variants in the order the search took them (smallest planned weight memory first, each model's "
                  "baseline before its other precisions; under winner_control=fixed_sequence, the size ladder from "
                  "the largest). A stopped variant's floor was out of reach with probability at least 1 - alpha over "
                  "the item order (an anytime-valid bound); a variant not needed as the sibling of a baseline far "
                  "below a floor would have had to gain more than search.sibling_margin on that task; see "
                  "docs/search.md.")
    width, waves = wave_lines(info)
    seed_line = order_seed_line(info.get("order_seed"), info.get("order_seed_source"))
    return {
        "table": table,
        "width": width,
        "waves": waves,
        "notes": [*info.get("notes", []), *([seed_line] if seed_line else [])],
        "line": (f"{saved.get('variants_measured', 0):.0f} of {saved.get('variants', 0):.0f} variants measured, "
                 f"{saved.get('items_evaluated', 0):.0f} of {saved.get('grid_items', 0):.0f} items scored"
                 + (f", {saved['siblings_not_needed']:.0f} not needed as siblings of a baseline far below a floor "
                    "(never converted, quantized or loaded)" if saved.get("siblings_not_needed") else "") + "; the "
                 f"variants took {fmt.seconds(saved.get('spent_s'))} against about "
                 f"{fmt.seconds(saved.get('grid_estimate_s'))} for the full grid (an estimate from this sweep's "
                 "own timings)") if saved else "",
    }


def wave_lines(search: dict[str, Any]) -> tuple[str, list[str]]:
    """The waves the search handed the launcher, for the console and the report: a heading with the
    width and where it came from, then one line per wave (its kind, wall time, variants)."""
    waves = search.get("waves") or []
    if not waves:
        return "", []
    workers, source = search.get("workers"), search.get("width_source")
    heading = (f"{len(waves)} wave{'s' if len(waves) != 1 else ''} of up to {workers} variant"
               f"{'s' if workers != 1 else ''} at a time" + (f" ({source})" if source else ""))
    lines = []
    for number, wave in enumerate(waves, 1):
        took = f", {wave['wall_s']:.0f} s" if wave.get("wall_s") is not None else ""
        lines.append(f"wave {number} ({wave['kind']}{took}): {', '.join(wave['names'])}")
    return heading, lines


SEED_SOURCES = {"search.seed": "set by search.seed", "seed": "set by seed=",
                "kept": "drawn by an earlier sweep of this eval set in this output folder, kept",
                "drawn": "drawn for this sweep, kept for this eval set in this output folder"}


def order_seed_line(seed: int | None, source: str | None) -> str:
    """Where the item order came from, and how to replay it (selector.sweep.order_seed)."""
    if seed is None:
        return ""
    return f"Item order: seed {seed} ({SEED_SOURCES.get(source or '', source or 'recorded')}); replay it with search.seed={seed}."
