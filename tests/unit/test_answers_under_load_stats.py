"""Answers under load (selector.measure.answers): the load test's requests carry their eval items,
and every level's answers are compared with the variant's answers at rest and scored with the
task's own metric; the counts, the accuracy over items and the paired test, by value."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from selector.generation import GenerationRequest, ItemRef
from selector.trace import RequestTrace
from selector.measure.answers import AnswerScorer
from selector.measure.load_driver import drive_level
from selector.measure.requests import salted
from selector.measure.traffic import ProbeRequests, load_requests
from selector.paths import DEFAULT_EVALSET
from selector.records import SampleRecord
from selector.tasks import load_evalset


@pytest.fixture(scope="module")
def tasks() -> list[Any]:
    return load_evalset(DEFAULT_EVALSET, ["arithmetic", "extraction", "code", "sentiment"], 10)


def by_name(tasks: list[Any]) -> dict[str, Any]:
    return {t.name: t for t in tasks}


def at_rest(tasks: list[Any], wrong: dict[str, set[str]] | None = None) -> list[SampleRecord]:
    """Every generation item answered with its target (score 1), except the ids in `wrong` ('' and 0)."""
    out = []
    for t in tasks:
        if t.type != "generate":
            continue
        for item in t.items:
            bad = item.id in (wrong or {}).get(t.name, set())
            out.append(SampleRecord(task=t.name, id=item.id, prompt="p", output="" if bad else item.targets["chat"],
                                    target=item.targets["chat"], score=0.0 if bad else 1.0))
    return out


def answered(task: str, item: str, text: str, error: str | None = None) -> RequestTrace:
    return RequestTrace(sent=0.0, end=1.0, text=text, error=error, item=ItemRef(task, item))


def scorer(tasks: list[Any], rest: list[SampleRecord], new_tokens: int = 32, **kw: Any) -> AnswerScorer:
    return AnswerScorer(tasks, rest, model_name="tiny", prompt_style="chat", new_tokens=new_tokens, **kw)


# ---- the requests carry their items ---------------------------------------------------------
def test_load_requests_carry_their_item_the_tasks_answer_length_and_stop_sequences(tasks: list[Any]) -> None:
    requests = load_requests(tasks, "tiny", "chat", 35, 32)
    named = by_name(tasks)
    firsts = [(r.item.task, r.item.id) for r in requests[:3]]  # interleaved: one of each generation task
    assert sorted(firsts) == [("arithmetic", "arith-001"), ("code", "code-001"), ("extraction", "extr-001")]
    assert all(r.item is not None and r.item.task != "sentiment" for r in requests)  # multiple choice: not sent
    lengths = {r.item.task: r.max_new_tokens for r in requests}
    # the task's own answer length where it fits within new_tokens; code's 160 is cut to 32 (and not scored)
    assert lengths == {"arithmetic": 8, "extraction": 16, "code": 32}
    assert all(r.stop == named[r.item.task].stop["chat"] for r in requests)
    assert requests[30].item == requests[0].item  # 30 items, cycled
    # the salted copies of a level and a probe's passes keep the item
    assert [r.item for r in salted(requests, "c8")] == [r.item for r in requests]
    probe = ProbeRequests(requests, 100, "p0")
    assert probe[77].item == requests[77 % 35].item and probe[77].cache_salt != requests[77 % 35].cache_salt


def test_a_multiple_choice_eval_set_sends_its_contexts_without_items(tasks: list[Any]) -> None:
    requests = load_requests([by_name(tasks)["sentiment"]], "tiny", "chat", 4, 12)
    assert [r.item for r in requests] == [None] * 4 and {r.max_new_tokens for r in requests} == {12}


def test_the_driver_copies_each_requests_item_onto_its_trace_failed_or_not() -> None:
    async def send(request: GenerationRequest) -> RequestTrace:
        if request.prompt == "boom":
            raise ConnectionError("reset")
        return RequestTrace(sent=0.0, end=0.0, text=f"answer to {request.prompt}")

    requests = [GenerationRequest("a", 4, item=ItemRef("arithmetic", "arith-001")),
                GenerationRequest("boom", 4, item=ItemRef("extraction", "extr-002")), GenerationRequest("c", 4)]
    traces = asyncio.run(drive_level(send, requests, concurrency=2))
    assert [t.item for t in traces] == [r.item for r in requests]
    assert traces[0].text == "answer to a" and traces[1].error == "ConnectionError: reset"


# ---- scoring a level --------------------------------------------------------------------------
def test_a_level_counts_changed_answers_per_request_and_scores_items_once(tasks: list[Any]) -> None:
    rest = at_rest(tasks, wrong={"arithmetic": {"arith-010"}})
    traces = [
        answered("arithmetic", "arith-001", "61"), answered("arithmetic", "arith-001", "61"),  # as at rest, twice
        answered("arithmetic", "arith-002", "57"),  # changed, now wrong
        answered("arithmetic", "arith-003", "It is 84"),  # changed, still right (numeric reads the last number)
        answered("arithmetic", "arith-003", " 84\n"),  # whitespace at the ends: not a change
        answered("arithmetic", "arith-010", "81"),  # wrong at rest ('') -> now right? its target decides
        answered("arithmetic", "arith-004", "", error="cut off: the level reached measure.load.max_duration_s"),
        answered("extraction", "extr-001", "Porto"),
    ]
    target_010 = next(i for i in by_name(tasks)["arithmetic"].items if i.id == "arith-010").targets["chat"]
    traces[5].text = target_010
    got = scorer(tasks, rest).level(traces)
    assert got is not None
    assert (got.requests, got.failed, got.compared, got.changed) == (8, 1, 7, 3)
    arith = got.tasks["arithmetic"]
    assert (arith.requests, arith.compared, arith.changed, arith.scored, arith.items) == (6, 6, 3, 6, 4)
    # per item: 001 1, 002 0, 003 (1 + 1) / 2 = 1, 010 1; at rest 1, 1, 1, 0
    assert arith.item_scores == {"arith-001": 1.0, "arith-002": 0.0, "arith-003": 1.0, "arith-010": 1.0}
    assert arith.value == pytest.approx(0.75) and arith.at_rest == pytest.approx(0.75)
    assert (arith.flips_to_wrong, arith.flips_to_right, arith.test) == (1, 1, "mcnemar")
    assert arith.p_value == pytest.approx(1.0)  # one item each way: no evidence of a move
    assert arith.ci_method == "exact" and arith.ci_low < 0.75 < arith.ci_high
    assert got.tasks["extraction"].changed == 0 and got.tasks["extraction"].value == 1.0
    # the changed answers whose score moved first, one per item
    assert [(e.task, e.id, e.under_load_score) for e in got.examples] == [
        ("arithmetic", "arith-002", 0.0), ("arithmetic", "arith-010", 1.0), ("arithmetic", "arith-003", 1.0)]
    assert got.examples[0].at_rest == "56" and got.examples[0].under_load == "57"


def test_six_items_wrong_under_load_give_mcnemars_exact_p_and_tangos_interval(tasks: list[Any]) -> None:
    arithmetic = by_name(tasks)["arithmetic"]
    traces = [answered("arithmetic", item.id, "0" if k < 6 else item.targets["chat"])
              for k, item in enumerate(arithmetic.items)]
    got = scorer(tasks, at_rest(tasks)).level(traces)
    arith = got.tasks["arithmetic"]  # type: ignore[union-attr]
    assert (arith.value, arith.at_rest, arith.flips_to_wrong, arith.flips_to_right) == (0.4, 1.0, 6, 0)
    assert arith.p_value == pytest.approx(2 * 0.5**6)  # McNemar's exact test: 6 of 6 discordant one way
    assert arith.diff_low < -0.6 + 1e-9 < arith.diff_high < 0  # Tango's interval holds the -60 points, below 0
    assert got.p_value == pytest.approx(2 * 0.5**6)  # one task scored: Holm changes nothing


def test_an_item_whose_requests_disagree_makes_the_test_wilcoxons(tasks: list[Any]) -> None:
    traces = [answered("arithmetic", "arith-001", "61"), answered("arithmetic", "arith-001", "0"),
              answered("arithmetic", "arith-001", "61"), answered("arithmetic", "arith-002", "0")]
    arith = scorer(tasks, at_rest(tasks)).level(traces).tasks["arithmetic"]  # type: ignore[union-attr]
    assert arith.item_scores == pytest.approx({"arith-001": 2 / 3, "arith-002": 0.0})
    assert arith.test == "wilcoxon" and arith.value == pytest.approx(1 / 3)
    assert (arith.flips_to_wrong, arith.flips_to_right) == (1, 0)  # 2/3 still counts as right at the 0.5 cut


def test_an_answer_as_at_rest_keeps_its_score_and_a_changed_one_is_scored_once(tasks: list[Any]) -> None:
    s = scorer(tasks, at_rest(tasks))
    calls: list[str] = []
    metric = s.tasks["arithmetic"].metric

    def counted(x: Any, args: Any) -> Any:
        calls.append(x.output)
        return metric.score(x, args)

    s.tasks["arithmetic"].metric = dataclasses.replace(metric, score=counted)
    traces = [answered("arithmetic", "arith-001", "61")] * 4 + [answered("arithmetic", "arith-001", "sixty-one")] * 5
    first = s.level(traces)
    second = s.level(traces)  # the next level: the same changed text is not scored again
    assert calls == ["sixty-one"]
    assert first.tasks["arithmetic"].changed == second.tasks["arithmetic"].changed == 5  # type: ignore[union-attr]


def test_a_task_cut_by_new_tokens_is_neither_compared_nor_scored_and_says_why(tasks: list[Any]) -> None:
    traces = [answered("extraction", "extr-001", "Port"), answered("arithmetic", "arith-001", "61")]
    got = scorer(tasks, at_rest(tasks), new_tokens=8).level(traces)
    extraction = got.tasks["extraction"]  # type: ignore[union-attr]
    assert (extraction.requests, extraction.compared, extraction.changed, extraction.value) == (1, 0, 0, None)
    assert extraction.note.startswith("not scored: measure.load.new_tokens=8 is shorter than its answers "
                                      "(max_new_tokens 16)")
    assert (got.compared, got.changed) == (1, 0)  # type: ignore[union-attr]


def test_a_sandboxed_metric_past_its_budget_is_compared_not_scored(tasks: list[Any]) -> None:
    s = scorer(tasks, at_rest(tasks), sandbox_budget=1)
    s.tasks["arithmetic"].metric = dataclasses.replace(s.tasks["arithmetic"].metric, sandboxed=True)
    one = s.level([answered("arithmetic", "arith-001", "60")])
    assert one.tasks["arithmetic"].value == 0.0  # type: ignore[union-attr]  # the one run the budget allows
    two = s.level([answered("arithmetic", "arith-001", "60"), answered("arithmetic", "arith-002", "55")])
    arith = two.tasks["arithmetic"]  # type: ignore[union-attr]
    assert (arith.changed, arith.value, arith.p_value) == (2, None, None)  # never scored on the part it could run
    assert "sandbox's budget (1 distinct answers per load test) was spent" in arith.note
    assert two.note.startswith("the sandbox's budget (1 distinct changed answers")  # type: ignore[union-attr]


def test_a_level_without_items_has_no_answers_and_a_request_file_gets_no_scorer(tasks: list[Any],
                                                                                  tmp_path: Path) -> None:
    from tests.factories import selector_config

    assert scorer(tasks, at_rest(tasks)).level([RequestTrace(sent=0.0, end=1.0, text="hi")]) is None
    cfg = selector_config(tmp_path)
    assert AnswerScorer.for_variant(tasks, cfg, at_rest(tasks)) is not None
    cfg.measure.load.requests = "loadsets/sample.jsonl"
    assert AnswerScorer.for_variant(tasks, cfg, at_rest(tasks)) is None
