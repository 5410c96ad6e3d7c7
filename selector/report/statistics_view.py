"""The report's statistics sections: the paired differences against the reference, what the rule can
tell apart at its size (power), sensitivity and sample-size advice, and the noise floor.

Each builder returns None when its data is absent, so the templates can skip the section.
"""

from __future__ import annotations

from typing import Any

from selector.report import fmt
from selector.report.view import Cell, Table, ci_label, order_records, task_names, verdicts_by_variant
from selector.stats_paired import holm
from selector.records import RunRecord
from selector.verdicts import Selection


def flag_alpha(selection: Selection) -> float:
    """The family-wise level of the paired table's flags (Holm over its cells): the policy's own, 1 - confidence."""
    return 1 - float(selection.policy.get("confidence") or 0.95)


def paired_table(records: list[RunRecord], selection: Selection) -> Table | None:
    """Each variant minus the reference on the same items: one row per variant, one column per task."""
    verdicts = verdicts_by_variant(selection)
    paired = [(r.name, verdicts[r.name].paired) for r in order_records(records)
              if r.name in verdicts and verdicts[r.name].paired]
    if not paired:
        return None
    named = task_names(records, selection)
    tasks = [t for t in named if any(t in p for _, p in paired)]
    tasks += sorted({t for _, p in paired for t in p} - set(named))
    table = Table(columns=["variant"] + tasks)
    alpha = flag_alpha(selection)
    cells = [(name, task, by_task[task]) for name, by_task in paired for task in tasks if task in by_task]
    tested = [(key, d.p) for key, d in ((c[:2], c[2]) for c in cells) if d.p is not None]
    adjusted = dict(zip([k for k, _ in tested], holm([p for _, p in tested])))
    for name, by_task in paired:
        row = [Cell(name, "name")]
        for task in tasks:
            d = by_task.get(task)
            if d is None:
                row.append(Cell(fmt.DASH, "num muted"))
                continue
            p_holm = adjusted.get((name, task))
            worse = p_holm is not None and p_holm < alpha and d.diff < 0
            test = "Wilcoxon" if d.test == "wilcoxon" else "McNemar"
            row.append(Cell(
                f"{fmt.points(d.diff)} {fmt.diff_ci(d.ci_low, d.ci_high).removesuffix(' pp')}",
                "num below" if worse else "num",
                f"n={d.n}; {d.flips_to_wrong} items right→wrong, {d.flips_to_right} wrong→right",
                sub=f"{test} p {fmt.pvalue(d.p)}, Holm {fmt.pvalue(p_holm)} · flips {d.flips_to_wrong}↓ {d.flips_to_right}↑",
            ))
        table.rows.append(row)
    table.note = (f"Reference: {selection.reference}. Each cell: variant accuracy minus reference accuracy "
                  f"on the same items, with its {ci_label(selection)} (0/1 scores: Tango's score interval; fractional scores: "
                  "a betting interval); the test's p (0/1 scores: McNemar's exact; fractional: Wilcoxon's signed-rank "
                  "on the raw scores) and the same p Holm-adjusted over every cell of this table; flips: items "
                  "the reference got right and the variant wrong (↓), and the reverse (↑; fractional scores cut "
                  f"at 0.5). Marked: significantly worse, Holm-adjusted p < {alpha:g} (1 - policy.confidence).")
    return table


def dict_table(rows: list[dict[str, Any]]) -> Table | None:
    """A free-form list of dicts (sensitivity, sample-size advice) as a table, keys in first-seen order."""
    if not rows:
        return None
    keys: list[str] = []
    for row in rows:
        keys += [k for k in row if k not in keys]
    table = Table(columns=[fmt.label(k) for k in keys], compact=True)
    for row in rows:
        table.rows.append([
            Cell(fmt.value(row.get(k)), "num" if isinstance(row.get(k), (int, float)) else "") for k in keys
        ])
    return table


def power_table(selection: Selection) -> Table | None:
    """Per task, what the rule can tell apart at its size (selection.power): the chance a variant a
    margin below the floor passes, the true accuracy needed to pass 80% of the time, and under
    non_inferiority the smallest margin shown for a truly equal variant and the items a margin needs."""
    rows = selection.power
    if not rows:
        return None
    ni = any("margin" in r for r in rows)
    floors = any("floor" in r for r in rows)
    columns = ["task", "items"]
    columns += ["floor", "a variant this far below passes", "passed 80% of the time from"] if floors else []
    columns += ["margin", "shown for a truly equal variant from", "identical answers: from",
                "items the margin needs"] if ni else []
    table = Table(columns=columns, compact=True)
    for r in rows:
        row = [Cell(r["task"]), Cell(str(r["n"]), "num")]
        if floors:
            known = "floor" in r
            row += [Cell(fmt.pct(r["floor"], 0) if known else fmt.DASH, "num"),
                    Cell(f"{fmt.points(-r['gap']).lstrip('+')}: {fmt.pct(r['passes_below'])}" if known else fmt.DASH,
                         "num"),
                    Cell(fmt.pct(r["truth_to_pass"]) if known and r["truth_to_pass"] is not None
                         else ("cannot pass" if known else fmt.DASH), "num")]  # fmt: skip
        if ni:
            flips = f" ({100 * r['discordance']:.0f}% flipping)" if r.get("discordance") is not None else ""
            row += [Cell(fmt.points(r["margin"]).lstrip("+") if "margin" in r else fmt.DASH, "num"),
                    Cell(fmt.points(r["detectable"]).lstrip("+") + flips if "margin" in r else fmt.DASH, "num"),
                    Cell(fmt.points(r["identical"]).lstrip("+") if "margin" in r else fmt.DASH, "num"),
                    Cell(str(r["needed"]) if r.get("needed") else fmt.DASH, "num")]
        table.rows.append(row)
    confidence = float(selection.policy.get("confidence") or 0.95)
    table.note = (f"Exact for 0/1 scores (every count, or every paired table up to 250 items), through the "
                  f"intervals and tests the verdict uses, at {confidence:.0%} confidence and 80% power. "
                  "\"This far below\": the policy's margin (policy.margins, default_margin) under the floor. "
                  "Non-inferiority: a variant truly equal to the reference, at the winner's share of answers "
                  "flipping (else 10%); identical answers are the best case. Fractional scores: computed as for "
                  "0/1 scores (their spread is at most that), and under non-inferiority for identical scores only. "
                  "See docs/selection.md.")
    return table


def noise_table(noise_floor: dict[str, float]) -> Table | None:
    if not noise_floor:
        return None
    table = Table(columns=["task", "score spread with nothing changed"], compact=True)
    for task, spread in noise_floor.items():
        table.rows.append([Cell(task), Cell(fmt.points(spread).lstrip("+"), "num")])
    return table
