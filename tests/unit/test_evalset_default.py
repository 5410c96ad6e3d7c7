"""The project's own eval set (selector/evalsets/default): sizes, ids, and that every gold answer is right.

Code rows are checked for real: each reference solution passes its tests in the sandbox, a wrong
one fails them, and the gold answers in both prompt styles score 1 through the code_tests metric.
"""

from __future__ import annotations

import ast
import json
import operator
import re

import pytest

from selector.tasks.sandbox import run_python
from selector.tasks import ScoreInput, Task, build_prompt, get_metric, load_evalset, resolve_style
from selector.paths import DEFAULT_EVALSET

EVALSET = DEFAULT_EVALSET
STYLES = ("chat", "plain")


@pytest.fixture(scope="module")
def tasks() -> dict[str, Task]:
    return {t.name: t for t in load_evalset(EVALSET)}


def test_the_four_tasks_with_40_to_60_items(tasks: dict[str, Task]) -> None:
    assert sorted(tasks) == ["arithmetic", "code", "extraction", "sentiment"]
    for task in tasks.values():
        assert 40 <= len(task.items) <= 60, task.name
        assert task.description


def test_ids_are_unique_across_the_whole_set(tasks: dict[str, Task]) -> None:
    ids = [item.id for task in tasks.values() for item in task.items]
    assert len(ids) == len(set(ids))


def test_each_task_has_3_to_5_fewshot_examples_not_in_the_scored_set(tasks: dict[str, Task]) -> None:
    for task in tasks.values():
        assert task.fewshot_data is not None
        file_rows = (EVALSET / task.fewshot_data).read_text().splitlines()
        assert 3 <= len(file_rows) <= 5, task.name
        assert 2 <= len(task.fewshot) <= len(file_rows)
        scored = {json.dumps(i.fields, sort_keys=True) for i in task.items}
        scored_ids = {i.id for i in task.items}
        for line in file_rows:
            row = json.loads(line)
            assert row["id"] not in scored_ids
            assert json.dumps({k: v for k, v in row.items() if k != "id"}, sort_keys=True) not in {
                json.dumps({k: v for k, v in json.loads(s).items() if k != "id"}, sort_keys=True) for s in scored
            }


def test_generation_budgets_stay_tight(tasks: dict[str, Task]) -> None:
    assert tasks["sentiment"].type == "multiple_choice"
    assert tasks["extraction"].max_new_tokens <= 16
    assert tasks["arithmetic"].max_new_tokens <= 8
    assert tasks["code"].max_new_tokens <= 160


def test_prompts_are_short(tasks: dict[str, Task]) -> None:
    for task in tasks.values():
        limit = 1500 if task.name == "code" else 800
        for item in task.items:
            assert len(build_prompt(task, item, "plain")) < limit, (task.name, item.id)


# ---- sentiment ----


def test_sentiment_uses_plain_prompts_for_smollm2(tasks: dict[str, Task]) -> None:
    # measured: near chance with SmolLM2's chat template, ~90% with plain few-shot prompts
    assert resolve_style(tasks["sentiment"], "smollm2-135m", "chat") == "plain"
    assert resolve_style(tasks["sentiment"], "qwen2.5-coder-1.5b", "chat") == "chat"


def test_sentiment_labels_are_balanced(tasks: dict[str, Task]) -> None:
    task = tasks["sentiment"]
    assert task.choices == ["positive", "negative"]
    labels = [item.targets["chat"] for item in task.items]
    assert labels.count("positive") == labels.count("negative")


# ---- extraction ----


def test_every_extraction_target_appears_verbatim_in_its_text(tasks: dict[str, Task]) -> None:
    for item in tasks["extraction"].items:
        assert item.targets["chat"] in item.fields["text"], item.id


def test_extraction_covers_each_kind_and_keeps_dates_as_written(tasks: dict[str, Task]) -> None:
    items = tasks["extraction"].items
    kinds = {item.fields["kind"] for item in items}
    assert kinds == {"city", "date", "name", "order"}
    dates = [item.fields["answer"] for item in items if item.fields["kind"] == "date"]
    assert "2026-09-30" in dates and "14/07/2022" in dates and "12.08.2024" in dates
    assert all(not re.search(r"\d{2}:\d{2}:\d{2}", d) for d in dates)  # never turned into timestamps


# ---- arithmetic ----

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


def _evaluate(node: ast.AST) -> int:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.FloorDiv):
            assert left % right == 0, "division must come out even"
        return _OPS[type(node.op)](left, right)
    raise AssertionError(f"unexpected expression {ast.dump(node)}")


def test_every_arithmetic_answer_is_an_integer_and_right(tasks: dict[str, Task]) -> None:
    for item in tasks["arithmetic"].items:
        answer = item.fields["answer"]
        assert re.fullmatch(r"-?\d+", answer), item.id
        expression = item.fields["expression"]
        assert 1 <= sum(expression.count(op) for op in "+-*/") - expression.count("//") <= 2, item.id
        assert _evaluate(ast.parse(expression, mode="eval")) == int(answer), item.id


# ---- gold answers score 1 with each task's own metric ----


@pytest.mark.parametrize("name", ["extraction", "arithmetic"])
def test_gold_answers_score_one(tasks: dict[str, Task], name: str) -> None:
    task = tasks[name]
    metric = get_metric(task.metric)
    for style in STYLES:
        inputs = [ScoreInput(i.targets[style], i.targets[style], i.fields, i.prompts[style], style) for i in task.items]
        assert [s.value for s in metric.score_batch(inputs, task.metric_args)] == [1.0] * len(inputs)


# ---- code ----


def test_every_code_row_has_a_solution_starting_with_its_signature(tasks: dict[str, Task]) -> None:
    for item in tasks["code"].items:
        assert item.fields["solution"].startswith(item.fields["signature"] + "\n"), item.id
        assert item.fields["tests"].count("assert ") >= 2, item.id


def test_every_reference_solution_passes_its_tests(tasks: dict[str, Task]) -> None:
    failures = []
    for item in tasks["code"].items:
        result = run_python(item.fields["solution"] + "\n\n" + item.fields["tests"], timeout_s=10)
        if not result.passed:
            failures.append((item.id, result.stderr_tail[-300:]))
    assert failures == []


def test_a_wrong_solution_fails_every_rows_tests(tasks: dict[str, Task]) -> None:
    passed_anyway = []
    for item in tasks["code"].items:
        wrong = item.fields["signature"] + "\n    return None"
        if run_python(wrong + "\n\n" + item.fields["tests"], timeout_s=10).passed:
            passed_anyway.append(item.id)
    assert passed_anyway == []


def test_gold_code_in_both_styles_scores_one_through_the_metric(tasks: dict[str, Task]) -> None:
    task = tasks["code"]
    metric = get_metric(task.metric)
    for style in STYLES:
        inputs = [ScoreInput(i.targets[style], i.targets[style], i.fields, i.prompts[style], style) for i in task.items]
        scored = metric.score_batch(inputs, task.metric_args)
        assert [item.id for item, s in zip(task.items, scored) if s.value != 1.0] == [], style


def test_code_plain_prompt_is_signature_and_docstring(tasks: dict[str, Task]) -> None:
    item = tasks["code"].items[0]
    assert item.prompts["plain"] == f'{item.fields["signature"]}\n    """{item.fields["description"]}"""\n'
    assert "```python" in item.prompts["chat"]
    assert tasks["code"].stop["plain"][:4] == ["\ndef ", "\nclass ", "\nif __name__", "\nprint("]
