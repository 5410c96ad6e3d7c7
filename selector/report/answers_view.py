"""The report's answers under load (docs/load-testing.md, "Answers under load"): per variant, level
and task, how many of the eval items' answers differ from the variant's answers at rest, the
accuracy on them against the same items at rest with the paired test, and a few changed answers.

Plain-text cells (report.view.Table), escaped by each renderer (HTML autoescape, Markdown's md
filter); an answer is shown as a Python literal (repr), so newlines and quotes stay visible.
"""

from __future__ import annotations

from typing import Any

from selector.report import fmt
from selector.report.view import Cell, Table, order_records
from selector.records import LoadLevel, RunRecord
from selector.records_answers import CAPACITY, LoadAnswers, TaskAnswers

EXAMPLES_PER_VARIANT = 6
SHOWN_CHARS = 80


def answer_levels(record: RunRecord) -> list[tuple[str, LoadAnswers]]:
    """(label, answers) of the ladder's levels (lightest first) and the confirmation run."""
    from selector.report.load_view import short_level, sorted_levels  # load_view does not import this module
    from selector.selection.cost import planning_capacity

    out = [(short_level(lv), lv.answers) for lv in sorted_levels(record.perf.load if record.perf else [])
           if lv.answers is not None]
    capacity = planning_capacity(record)
    trial = capacity.confirmation if capacity is not None else None
    if trial is not None and trial.level.answers is not None:
        out.append((f"{CAPACITY} ({fmt.sig(trial.rate_rps)} req/s)", trial.level.answers))
    return out


def probe_levels(record: RunRecord) -> list[LoadLevel]:
    """The capacity searches' probes with answers, in the order probed."""
    from selector.report.capacity_view import searches

    return [s.level for c in searches(record) for s in c.steps if s.level.answers is not None]


def _changed(answers: LoadAnswers | TaskAnswers) -> Cell:
    if not answers.compared:
        return Cell(fmt.DASH, "num muted")
    return Cell(f"{answers.changed} of {answers.compared}", "num below" if answers.changed else "num",
                sub=fmt.pct(answers.share))


def _task_row(name: str, label: str, task: str, t: TaskAnswers) -> list[Cell]:
    if t.value is None:
        return [Cell(name, "name"), Cell(label), Cell(task), _changed(t), Cell(fmt.DASH, "num muted", t.note),
                Cell(fmt.DASH, "num muted"), Cell(fmt.DASH, "num muted"), Cell(t.note or "not scored", "muted")]
    moved = t.p_value is not None and t.p_value < 0.05
    test = "McNemar" if t.test == "mcnemar" else "Wilcoxon"
    diff = (t.value - (t.at_rest or 0.0))
    return [Cell(name, "name"), Cell(label), Cell(task), _changed(t),
            Cell(fmt.pct(t.value), "num", sub=f"[{fmt.pct(t.ci_low, 0)}–{fmt.pct(t.ci_high, 0)}]"),
            Cell(fmt.pct(t.at_rest), "num", sub=f"{t.items} items"),
            Cell(fmt.points(diff), "num below" if moved else "num",
                 sub=fmt.diff_ci(t.diff_low, t.diff_high) if t.diff_low is not None and t.diff_high is not None
                 else ""),
            Cell(f"{test} p {fmt.pvalue(t.p_value)}", "below" if moved else "")]


def answers_table(records: list[RunRecord]) -> Table | None:
    """Per variant, level and task: answers changed, accuracy under load and at rest, the paired test."""
    table = Table(columns=["variant", "level", "task", "answers changed", "accuracy under load", "at rest",
                           "difference", "paired test"])
    for r in order_records(records):
        for label, answers in answer_levels(r):
            for task, t in answers.tasks.items():
                table.rows.append(_task_row(r.name, label, task, t))
            if answers.failed:
                table.rows.append([Cell(r.name, "name"), Cell(label), Cell("(failed)"),
                                   Cell(f"{answers.failed} of {answers.requests}", "num muted"),
                                   *(Cell(fmt.DASH, "num muted") for _ in range(3)),
                                   Cell("no answer: failed or cut off", "muted")])
        probes = probe_levels(r)
        if probes:
            table.rows.append(_probes_row(r.name, probes))
    if not table.rows:
        return None
    table.note = ("The eval items' answers the load test's requests got, against the same variant's answers at rest "
                  "(its evaluation), each request with its task's prompt, stop sequences and answer length. Changed: "
                  "answers that differ (whitespace at the ends aside), of the requests compared. Accuracy over items "
                  "(an item sent several times counts once, at its mean score), with its interval; at rest: the same "
                  "items' accuracy in the evaluation. Difference: under load minus at rest, with the paired interval; "
                  "paired test: McNemar's exact test on 0/1 scores, Wilcoxon's signed-rank test otherwise, per item.")
    return table


def _probes_row(name: str, probes: list[LoadLevel]) -> list[Cell]:
    compared = sum(lv.answers.compared for lv in probes)  # type: ignore[union-attr]
    changed = sum(lv.answers.changed for lv in probes)  # type: ignore[union-attr]
    worst = max(probes, key=lambda lv: lv.answers.share or 0.0)  # type: ignore[union-attr]
    at = f"{fmt.sig(worst.rate_rps)} req/s" if worst.rate_rps is not None else f"c={worst.concurrency}"
    least = min((lv.answers.p_value for lv in probes if lv.answers.p_value is not None),  # type: ignore[union-attr]
                default=None)
    return [Cell(name, "name"), Cell(f"capacity probes ({len(probes)})"), Cell("all"),
            Cell(f"{changed} of {compared}" if compared else fmt.DASH, "num below" if changed else "num",
                 sub=fmt.pct(changed / compared) if compared else ""),
            Cell(fmt.DASH, "num muted"), Cell(fmt.DASH, "num muted"), Cell(fmt.DASH, "num muted"),
            Cell(f"most changed at {at}: {fmt.pct(worst.answers.share)}; smallest level p {fmt.pvalue(least)}"
                 " (per probe in the record and MLflow)")]  # type: ignore[union-attr]


def examples_table(records: list[RunRecord]) -> Table | None:
    """A few changed answers per variant: at rest and under load, as Python literals."""
    table = Table(columns=["variant", "level", "task", "item", "at rest", "under load"])
    for r in order_records(records):
        shown: set[tuple[str, str]] = set()
        for label, answers in answer_levels(r):
            for e in answers.examples:
                if (e.task, e.id) in shown or len(shown) >= EXAMPLES_PER_VARIANT:
                    continue
                shown.add((e.task, e.id))
                table.rows.append([Cell(r.name, "name"), Cell(label), Cell(e.task), Cell(e.id),
                                   Cell(_shown(e.at_rest), sub=_score(e.at_rest_score)),
                                   Cell(_shown(e.under_load), "below" if _worse(e) else "",
                                        sub=_score(e.under_load_score))])
    if not table.rows:
        return None
    table.note = "The first changed answers of each level (one per item, those whose score moved first), cut short."
    return table


def _shown(text: str) -> str:
    return repr(text[:SHOWN_CHARS] + ("…" if len(text) > SHOWN_CHARS else ""))


def _score(score: float | None) -> str:
    return "not scored" if score is None else f"score {score:g}"


def _worse(e: Any) -> bool:
    return e.under_load_score is not None and e.under_load_score < e.at_rest_score


def not_scored(records: list[RunRecord]) -> list[str]:
    """One line per variant whose load test has no answers to score, and why (said once)."""
    out = []
    for r in order_records(records):
        perf = r.perf
        if perf is None or (not perf.load and not probe_levels(r) and perf.capacity is None
                            and perf.capacity_concurrency is None):
            continue
        if answer_levels(r) or probe_levels(r):
            continue
        load = ((r.config or {}).get("measure") or {}).get("load") or {}
        why = (f"the load test sent measure.load.requests ({load['requests']}), whose rows are not eval items"
               if load.get("requests") else
               "its requests carried no eval item with a generated answer at rest (a multiple-choice eval set, "
               "or a record from before answers were scored)")
        out.append(f"{r.name}: answers under load not scored: {why}.")
    return out


def answers_section(records: list[RunRecord]) -> dict[str, Any] | None:
    table, examples, lines = answers_table(records), examples_table(records), not_scored(records)
    if table is None and not lines:
        return None
    return {"table": table, "examples": examples, "notes": lines}
