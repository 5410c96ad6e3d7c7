"""A comparison of two sweeps (selector.sweep.comparison) as tables of plain-text cells: for `python -m
selector compare`, its Markdown file and console, and the report of a sweep run with compare_to."""

from __future__ import annotations

import json
from typing import Any

from selector.report import fmt
from selector.report.view import Cell, Table

NOTE = ("Change: B minus A. Noise: accuracy, the paired 95% interval of the difference (and the noise floor, where "
        "measured); a latency percentile, 1.96 x the standard errors of both runs' own quantiles (from each run's "
        "spread) and at least 5% of A; a figure measured once (req/s, tok/s, goodput, peak memory), 5% of A; weight "
        "memory is exact. 'within noise': no larger than that. When only measure.load keys changed, the "
        "single-request figures are the control ('control'), and a load figure that moved relatively no more than "
        "the control's e2e p50 is 'within drift'. docs/load-testing.md, 'Comparing sweeps'.")
VERDICT_KIND = {"better": "num", "worse": "num below", "within noise": "num muted", "same": "num muted",
                "within drift": "num muted", "control": "num muted"}
QUIET = ("same", "within noise", "within drift", "control")  # not moved by the change


def _value(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, default=str) if isinstance(v, (list, dict)) else fmt.value(v)


def number(value: float | None, unit: str, signed: bool = False) -> str:
    if value is None:
        return fmt.DASH
    if unit == "%":
        return fmt.points(value) if signed else fmt.pct(value)
    text = fmt.millis(abs(value)) if unit == "ms" else fmt.sig(abs(value))
    sign = ("+" if value > 0 else "−" if value < 0 else "±") if signed else ("-" if value < 0 else "")
    return f"{sign}{text} {unit}"


def config_table(comparison: dict[str, Any]) -> Table:
    table = Table(columns=["config key", "A", "B"], compact=True)
    for d in comparison["config"]:
        table.rows.append([Cell(d["key"], "name"), Cell(_value(d["a"])), Cell(_value(d["b"]))])
    if not comparison["config"]:
        table.rows.append([Cell("(none)", "muted"), Cell(fmt.DASH), Cell(fmt.DASH)])
    table.note = "Model and precision are the variants (below), not config keys."
    return table


def changes_table(comparison: dict[str, Any], only_moved: bool = False) -> Table:
    """One row per variant and measure; only_moved: leave out the rows that did not move beyond
    noise (accuracy rows stay: that it did not move is the news)."""
    table = Table(columns=["variant", "measure", "A", "B", "change", "noise", "verdict"])
    for r in comparison["rows"]:
        if only_moved and r["verdict"] in QUIET and not r["measure"].startswith("accuracy"):
            continue
        noise = "exact" if r["noise_from"] == "exact" else fmt.DASH if r["noise"] is None else (
            f"±{abs(r['noise']) * 100:.1f} pp" if r["unit"] == "%" else f"±{number(abs(r['noise']), r['unit'])}")
        table.rows.append([
            Cell(r["variant"], "name"), Cell(r["measure"]), Cell(number(r["a"], r["unit"]), "num"),
            Cell(number(r["b"], r["unit"]), "num"), Cell(number(r["change"], r["unit"], signed=True), "num"),
            Cell(noise, "num", r["noise_from"]), Cell(r["verdict"], VERDICT_KIND.get(r["verdict"], "")),
        ])
    table.note = NOTE
    return table


def counts(comparison: dict[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in comparison["rows"]:
        out[r["verdict"]] = out.get(r["verdict"], 0) + 1
    return out


def headline(comparison: dict[str, Any]) -> str:
    """One line: what changed in the config, and how many figures moved beyond noise."""
    keys = [d["key"] for d in comparison["config"]]
    changed = (f"{len(keys)} config key{'s differ' if len(keys) != 1 else ' differs'} ({', '.join(keys[:6])}"
               f"{', …' if len(keys) > 6 else ''})") if keys else "the configs are the same"
    n = counts(comparison)
    moved = (f"{n.get('better', 0)} figures better, {n.get('worse', 0)} worse, "
             f"{n.get('within noise', 0) + n.get('same', 0)} within noise")
    drift = comparison.get("drift") or {}
    if drift:
        moved += (f", {n.get('within drift', 0)} within drift (only serving keys changed, yet single-request e2e "
                  f"p50, which they cannot move, moved {max(drift.values()):.0%}: the machine between the runs)")
    busy = comparison.get("busy") or []
    caveat = (f" The machine was busy during {', '.join(busy)}: latency and throughput changes there may be the "
              "machine, not the change.") if busy else ""
    return f"{changed}; over {len(comparison['variants'])} variant(s) in both: {moved}.{caveat}"


def section(comparison: dict[str, Any] | None, brief: bool = False) -> dict[str, Any] | None:
    """What a report shows of it (None: the sweep named no predecessor); brief: only the rows that
    moved beyond noise, and accuracy."""
    if not comparison:
        return None
    if comparison.get("error"):
        return {"error": comparison["error"], "a": comparison.get("a", {}), "b": comparison.get("b", {})}
    return {"a": comparison["a"], "b": comparison["b"], "headline": headline(comparison),
            "config": config_table(comparison), "changes": changes_table(comparison, only_moved=brief),
            "only_a": comparison["only_a"], "only_b": comparison["only_b"]}
