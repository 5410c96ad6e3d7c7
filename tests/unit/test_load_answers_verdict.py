"""Answers under load downstream of the record: policy.floors_under_load in the verdict (and its bad
input), the warning without it, MLflow's metric names, the report's tables (escaped) and the console."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from selector.config import LoadConfig, PolicyConfig
from selector.errors import ConfigError
from selector.paths import DEFAULT_EVALSET
from selector.records import CapacityConfirmation, CapacityResult, LoadLevel, PerfResult, RunRecord
from selector.records_answers import ChangedAnswer
from selector.selection import select
from selector.selection.under_load import floors_under_load_problem, planned_levels
from tests.factories import GB, load_answers, run_record, task_result

RIGHT10 = {f"arithmetic-{i}": 1.0 for i in range(10)}


def level(concurrency: int | None, answers, rate: float | None = None) -> LoadLevel:  # type: ignore[no-untyped-def]
    return LoadLevel(concurrency=concurrency, rate_rps=rate, requests=10, errors=0, duration_s=5.0,
                     request_throughput=2.0, output_tokens_per_s=10.0, answers=answers)


def wrong(k: int) -> dict[str, float]:
    """The ten arithmetic items, the first k wrong."""
    return {i: (0.0 if n < k else 1.0) for n, i in enumerate(RIGHT10)}


def variant(precision: str, c8_wrong: int, weight: int, confirm_wrong: int | None = None) -> RunRecord:
    """Right on every item at rest and at c1; at c8 (and the confirmation run) the first k wrong."""
    perf = PerfResult(device="cpu", load=[level(1, load_answers({"arithmetic": (RIGHT10, RIGHT10)})),
                                          level(8, load_answers({"arithmetic": (wrong(c8_wrong), RIGHT10)}))])
    if confirm_wrong is not None:
        trial = CapacityConfirmation(rate_rps=2.0, window_s=60, warmup_s=5, held=True,
                                     level=level(None, load_answers({"arithmetic": (wrong(confirm_wrong), RIGHT10)}),
                                                 rate=2.0))
        perf.capacity = CapacityResult(slo={"e2e_ms_p95": 1000}, confidence=0.95, tolerance=0.25, requests_per_step=10,
                                       capacity_rps=2.5, confirmation=trial)
    return run_record("m", precision, [task_result("arithmetic", list(RIGHT10.values()), metric="numeric")],
                      weight_bytes=weight * GB, perf=perf)


def verdicts(records: list[RunRecord], **policy: object) -> dict[str, object]:
    selection = select(records, PolicyConfig(floors={"arithmetic": 0.5}, **policy))  # type: ignore[arg-type]
    return {v.variant: v for v in selection.verdicts} | {"_": selection}


# ---- the verdict ------------------------------------------------------------------------------
def test_floors_under_load_reject_a_variant_that_misses_a_floor_at_that_level_only() -> None:
    small, large = variant("int4", c8_wrong=6, weight=1), variant("bf16", c8_wrong=0, weight=4)
    at_rest = verdicts([small, large])
    assert at_rest["_"].winner == "m/int4"  # type: ignore[attr-defined]  # the floors at rest: both pass
    got = verdicts([small, large], floors_under_load="c8")
    assert got["_"].winner == "m/bf16"  # type: ignore[attr-defined]
    rejected = got["m/int4"]
    assert rejected.status == "rejected"  # type: ignore[attr-defined]
    assert rejected.reasons == [  # type: ignore[attr-defined]
        "arithmetic under load at c8 (10 items): 40.0% < floor 50.0% (10.0 points short)"]
    check = next(c for c in rejected.checks if c.name == "accuracy@c8:arithmetic")  # type: ignore[attr-defined]
    assert (check.value, check.limit, check.passed, check.rule) == (pytest.approx(0.4), 0.5, False, "point")
    assert "every floor (at rest and at c8)" in got["_"].summary  # type: ignore[attr-defined]


def test_floors_under_load_follow_the_rule_lower_bound_with_the_same_interval() -> None:
    one_wrong = variant("int4", c8_wrong=1, weight=1)
    passed = verdicts([one_wrong], floors_under_load="c8", rule="lower_bound")["m/int4"]
    check = next(c for c in passed.checks if c.name == "accuracy@c8:arithmetic")  # type: ignore[attr-defined]
    # Clopper-Pearson's lower end for 9 of 10 at 95%, as at rest
    assert check.passed and check.value == pytest.approx(0.5550, abs=1e-4)
    stricter = select([one_wrong], PolicyConfig(floors={"arithmetic": 0.6}, rule="lower_bound", floors_under_load="c8"))
    (v,) = stricter.verdicts
    assert v.reasons == [  # at rest, 10 of 10 clears it (lower bound 69.2%)
        "arithmetic under load at c8 (10 items): lower bound 55.5% (95% CI) < floor 60.0% (4.5 points short)"]


def test_the_confirmation_run_is_the_level_named_capacity_and_a_level_not_run_is_not_measured() -> None:
    record = variant("int4", c8_wrong=0, weight=1, confirm_wrong=7)
    got = verdicts([record], floors_under_load="capacity")["m/int4"]
    assert got.reasons == [  # type: ignore[attr-defined]
        "arithmetic under load at capacity (10 items): 30.0% < floor 50.0% (20.0 points short)"]
    missing = verdicts([record], floors_under_load="c16")["m/int4"]
    assert missing.reasons == [  # type: ignore[attr-defined]
        "arithmetic under load at c16: not measured (its load test has no answers at c16 (it has c1, c8, capacity))"]


def test_without_floors_under_load_a_significant_move_is_a_warning_after_holm() -> None:
    flips = variant("int4", c8_wrong=10, weight=1)
    warnings = verdicts([flips])["_"].warnings  # type: ignore[attr-defined]
    (line,) = [w for w in warnings if "under load" in w]
    assert line == ("m/int4: answers under load differ from its answers at rest: arithmetic at c8 0.0% against "
                    "100.0% at rest on the same 10 items, 10 of 10 answers changed (McNemar p 0.00195, 0.00391 after "
                    "Holm over its 2 tests). The verdict judges the floors at rest; policy.floors_under_load=c8 "
                    "judges them there too.")
    assert not [w for w in verdicts([variant("int4", c8_wrong=5, weight=1)])["_"].warnings  # type: ignore[attr-defined]
                if "under load" in w]  # 5 of 10: p 0.0625, not significant
    assert not [w for w in verdicts([flips], floors_under_load="c8")["_"].warnings  # type: ignore[attr-defined]
                if "under load differ" in w]  # judged instead


# ---- bad input ----------------------------------------------------------------------------------
def test_a_level_key_that_is_not_one_is_refused_with_the_forms_it_takes() -> None:
    with pytest.raises(ConfigError) as e:
        select([], PolicyConfig(floors_under_load="8"))
    assert e.value.field == "floors_under_load"
    assert "'8' is not a load level: name one as c<concurrency> (c8), r<requests per second> (r2.5) or capacity" \
        in e.value.problem


def test_before_anything_loads_a_level_the_load_test_does_not_run_names_the_levels_it_has() -> None:
    from selector.tasks import load_evalset

    tasks = load_evalset(DEFAULT_EVALSET, ["arithmetic", "extraction", "code", "sentiment"], 2)
    policy = PolicyConfig(floors={"arithmetic": 0.5, "sentiment": 0.5}, floors_under_load="c16")
    load = LoadConfig(enabled=True, concurrency=[1, 2, 4, 8], rates_rps=[2.5], capacity=True)
    assert planned_levels(load) == ["c1", "c2", "c4", "c8", "r2.5", "capacity"]
    assert floors_under_load_problem(policy, load, tasks) == \
        "the load test runs no level c16; its levels: c1, c2, c4, c8, r2.5, capacity"
    ok = PolicyConfig(floors={"arithmetic": 0.5, "sentiment": 0.5}, floors_under_load="r2.5")
    assert floors_under_load_problem(ok, load, tasks) is None
    assert floors_under_load_problem(ok, LoadConfig(enabled=True, requests="mine.jsonl", rates_rps=[2.5]), tasks) == (
        "the load test sends measure.load.requests (mine.jsonl), whose rows are not eval items: no level has answers "
        "to judge the floors on")
    assert str(floors_under_load_problem(ok, LoadConfig(), tasks)).startswith("the load test runs no level")
    only_mc = PolicyConfig(floors={"sentiment": 0.5}, floors_under_load="c8")
    assert str(floors_under_load_problem(only_mc, load, tasks)).startswith("no floor to judge under load")
    code = PolicyConfig(floors={"code": 0.5}, floors_under_load="c8")
    assert floors_under_load_problem(code, load, tasks) == (
        "the floor of code cannot be judged under load: measure.load.new_tokens=32 is shorter than its answers "
        "(160 tokens), which would be cut; set measure.load.new_tokens=160")


# ---- MLflow, the report, the console ------------------------------------------------------------
def test_each_levels_answers_are_mlflow_metrics_at_its_step_and_the_confirmations_with_their_prefix() -> None:
    from selector.trackers.naming import load_metrics, record_metrics

    record = variant("int4", c8_wrong=6, weight=1, confirm_wrong=2)
    steps = {(name, step): value for name, value, step in load_metrics(record)}
    assert steps[("load/answers_changed", 1)] == 0.0 and steps[("load/answers_changed", 8)] == 6.0
    assert steps[("load/answers_changed_share", 8)] == pytest.approx(0.6)
    assert steps[("load/accuracy/arithmetic", 8)] == pytest.approx(0.4)
    assert steps[("load/accuracy_at_rest/arithmetic", 8)] == 1.0
    assert steps[("load/answers_p/arithmetic", 8)] == pytest.approx(2 * 0.5**6)
    metrics = record_metrics(record)
    assert metrics["capacity/confirm_answers_changed"] == 2.0
    assert metrics["capacity/confirm_accuracy/arithmetic"] == pytest.approx(0.8)


def test_the_report_tabulates_answers_and_escapes_the_changed_ones(tmp_path: Path) -> None:
    from selector.report import render_terminal_summary, write_report

    example = ChangedAnswer(task="arithmetic", id="arithmetic-0", at_rest="56", under_load="<script>|x\n`y`",
                            at_rest_score=1.0, under_load_score=0.0)
    record = variant("int4", c8_wrong=6, weight=1)
    record.perf.load[1].answers.examples = [example]  # type: ignore[union-attr]
    quiet = variant("bf16", c8_wrong=0, weight=4)
    file_only = run_record("m", "fp32", [task_result("arithmetic", list(RIGHT10.values()), metric="numeric")],
                           weight_bytes=8 * GB, perf=PerfResult(device="cpu", load=[level(2, None)]),
                           config={"measure": {"load": {"requests": "mine.jsonl"}}})
    records = [record, quiet, file_only]
    selection = select(records, PolicyConfig(floors={"arithmetic": 0.5}))
    paths = write_report(records, selection, {"experiment": "x"}, tmp_path)
    html, md = paths["html"].read_text(), paths["md"].read_text()
    assert "<script>" not in html and "&#39;&lt;script&gt;|x\\n`y`&#39;" in html
    section = md[md.index("### Answers under load"):]
    assert "| m/int4 | c=8 | arithmetic | 6 of 10 (60.0%) | 40.0% (\\[12%–74%\\]) | 100.0% (10 items) | " \
           "−60.0 pp" in section
    assert "McNemar p 0.031 |" in section
    assert r"| m/int4 | c=8 | arithmetic | arithmetic-0 | '56' (score 1) | '&lt;script&gt;\|x\\n\`y\`' (score 0) |" \
        in section
    assert "- m/fp32: answers under load not scored: the load test sent measure.load.requests (mine.jsonl), whose " \
           "rows are not eval items." in section
    out = io.StringIO()
    Console(file=out, width=200).print(render_terminal_summary(records, selection))
    text = out.getvalue()
    assert "Answers under load (against the same variant at rest)" in text
    rows = [line for line in text.splitlines() if "m/int4" in line and "c=8" in line and "vs" in line]
    assert rows and "6 of 10 (60%)" in rows[0] and "arithmetic 40.0% vs 100.0%" in rows[0]
    assert not [line for line in text.splitlines() if "m/bf16" in line and "vs" in line]  # nothing changed


def test_the_console_shows_no_answers_table_when_no_answer_changed() -> None:
    from selector.report import render_terminal_summary

    records = [variant("bf16", c8_wrong=0, weight=4)]
    out = io.StringIO()
    Console(file=out, width=200).print(render_terminal_summary(records, select(records, PolicyConfig())))
    assert "Answers under load" not in out.getvalue()
