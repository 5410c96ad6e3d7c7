"""Prompt building and task evaluation. The engine here is a small deterministic stand-in (the
engine is not under test); loader, prompts, metrics and sandbox are the real ones."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from selector.generation import (
    Generation,
    GenerationRequest,
    Loglikelihood,
    LoglikelihoodRequest,
    Progress,
    Prompt,
)
from selector.errors import ConfigError
from selector.stats import clopper_pearson_interval, wilson_interval
from selector.tasks import build_prompt, build_requests, evaluate_task, load_evalset, resolve_style
from selector.records import SampleRecord


class AnswerBook:
    """Generates by looking up the last question in the prompt; log-likelihood prefers the
    continuation named in `prefer` for contexts containing a keyword, else the first choice."""

    name = "answer-book"

    def __init__(self, answers: dict[str, str] | None = None, prefer: dict[str, str] | None = None) -> None:
        self.answers, self.prefer = answers or {}, prefer or {}
        self.generate_calls: list[list[GenerationRequest]] = []
        self.loglikelihood_calls: list[list[LoglikelihoodRequest]] = []

    def render(self, prompt: Prompt) -> str:
        if isinstance(prompt, str):
            return prompt
        return "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in prompt) + "<assistant>"

    def generate(self, requests: list[GenerationRequest], progress: Progress | None = None) -> list[Generation]:
        self.generate_calls.append(requests)
        out = []
        for r in requests:
            question = re.findall(r"Q: (.*?)(?:\n|<|$)", self.render(r.prompt))[-1]
            out.append(Generation(self.answers.get(question, "?"), prompt_tokens=10, output_tokens=2))
            if progress:
                progress(1)
        return out

    def loglikelihood(self, requests: list[LoglikelihoodRequest], progress: Progress | None = None) -> list[Loglikelihood]:
        self.loglikelihood_calls.append(requests)
        out = []
        for r in requests:
            item_text = self.render(r.context).rsplit("Review:", 1)[-1]
            wanted = next((v for k, v in self.prefer.items() if k in item_text), None)
            good = wanted is not None and r.continuation.endswith(wanted)
            out.append(Loglikelihood(-0.5 if good else -2.0, 1, good))
        if progress:
            for _ in requests:
                progress(1)
        return out


GENERATE = """\
type: generate
data: t.jsonl
prompt: {chat: "Q: {{ question }}", plain: "Q: {{ question }}\\nA:"}
target: "{{ answer }}"
system: Be brief.
fewshot: {n: 2, data: shots.jsonl}
stop: {chat: ["\\n\\n"], plain: ["\\n"]}
max_new_tokens: 6
prompt_style_overrides: {base-model: plain}
"""

CHOICE = """\
type: multiple_choice
data: t.jsonl
prompt: "Review: {{ text }}"
target: "{{ label }}"
choices: [positive, negative]
target_delimiter: " => "
fewshot: {n: 1, data: shots.jsonl}
"""


def write(folder: Path, spec: str, rows: list[dict], shots: list[dict]) -> Path:
    (folder / "t.yaml").write_text(spec)
    (folder / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "shots.jsonl").write_text("".join(json.dumps(r) + "\n" for r in shots))
    return folder


@pytest.fixture
def gen_task(tmp_path: Path):  # type: ignore[no-untyped-def]
    rows = [{"id": f"q{i}", "question": f"{i}+{i}", "answer": str(2 * i)} for i in range(1, 6)]
    shots = [{"question": "1+0", "answer": "1"}, {"question": "0+0", "answer": "0"}, {"question": "9+9", "answer": "18"}]
    [task] = load_evalset(write(tmp_path, GENERATE, rows, shots))
    return task


@pytest.fixture
def choice_task(tmp_path: Path):  # type: ignore[no-untyped-def]
    rows = [
        {"id": "r1", "text": "great food", "label": "positive"},
        {"id": "r2", "text": "awful service", "label": "negative"},
        {"id": "r3", "text": "awful but cheap", "label": "positive"},
        {"id": "r4", "text": "{{ label }} literally", "label": "negative"},
    ]
    [task] = load_evalset(write(tmp_path, CHOICE, rows, [{"text": "fine", "label": "positive"}]))
    return task


# ---- style and prompts ----


def test_style_resolution_order(gen_task) -> None:  # type: ignore[no-untyped-def]
    assert resolve_style(gen_task, "chat-model", "chat") == "chat"
    assert resolve_style(gen_task, "chat-model", "plain") == "plain"
    assert resolve_style(gen_task, "base-model", "chat") == "plain"  # the task's per-model override wins
    gen_task.prompt_style = "chat"
    assert resolve_style(gen_task, "other", "plain") == "chat"  # the task's own style beats the model's
    with pytest.raises(ConfigError, match="prompt_style"):
        gen_task.prompt_style = "model"
        resolve_style(gen_task, "m", "html")


def test_chat_prompt_has_system_fewshot_turns_then_the_item(gen_task) -> None:  # type: ignore[no-untyped-def]
    assert build_prompt(gen_task, gen_task.items[0], "chat") == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Q: 1+0"},
        {"role": "assistant", "content": "1"},
        {"role": "user", "content": "Q: 0+0"},
        {"role": "assistant", "content": "0"},
        {"role": "user", "content": "Q: 1+1"},
    ]


def test_plain_prompt_joins_examples_with_delimiters(gen_task) -> None:  # type: ignore[no-untyped-def]
    assert build_prompt(gen_task, gen_task.items[1], "plain") == "Q: 1+0\nA: 1\n\nQ: 0+0\nA: 0\n\nQ: 2+2\nA:"


def test_generation_requests_use_the_styles_stops(gen_task) -> None:  # type: ignore[no-untyped-def]
    chat = build_requests(gen_task, "m", "chat")
    plain = build_requests(gen_task, "base-model", "chat")
    assert len(chat) == 5 and all(isinstance(r, GenerationRequest) for r in chat)
    assert chat[0].stop == ["\n\n"] and plain[0].stop == ["\n"] and plain[0].max_new_tokens == 6
    assert isinstance(plain[0].prompt, str) and isinstance(chat[0].prompt, list)


def test_multiple_choice_continuations(choice_task) -> None:  # type: ignore[no-untyped-def]
    plain = build_requests(choice_task, "m", "plain")
    chat = build_requests(choice_task, "m", "chat")
    assert [r.continuation for r in plain[0]] == [" => positive", " => negative"]
    assert plain[0][0].context == "Review: fine => positive\n\nReview: great food"
    assert [r.continuation for r in chat[0]] == ["positive", "negative"]
    assert chat[0][0].context[-1] == {"role": "user", "content": "Review: great food"}


def test_template_syntax_in_a_field_stays_literal(choice_task) -> None:  # type: ignore[no-untyped-def]
    assert build_requests(choice_task, "m", "plain")[3][0].context.endswith("Review: {{ label }} literally")


# ---- evaluation ----


def test_evaluate_generate_scores_records_and_streams(gen_task) -> None:  # type: ignore[no-untyped-def]
    engine = AnswerBook({"1+1": "2", "2+2": "4", "3+3": "7", "4+4": " 8 ", "5+5": "10"})
    streamed: list[SampleRecord] = []
    ticks: list[int] = []
    result, records = evaluate_task(engine, gen_task, "m", "chat", on_sample=streamed.append, progress=ticks.append)
    assert len(engine.generate_calls) == 1 and len(engine.generate_calls[0]) == 5  # one batched call
    assert result.value == pytest.approx(0.8) and result.n == 5 and result.metric == "exact_match"
    assert (result.ci_low, result.ci_high) == pytest.approx(clopper_pearson_interval(4, 5, 0.95))
    assert result.ci_method == "exact" and result.higher_is_better
    assert result.item_scores == {"q1": 1.0, "q2": 1.0, "q3": 0.0, "q4": 1.0, "q5": 1.0}
    assert streamed == records and sum(ticks) == 5
    third = records[2]
    assert (third.id, third.output, third.target, third.score) == ("q3", "7", "6", 0.0)
    assert third.prompt == ("<system>Be brief.</system><user>Q: 1+0</user><assistant>1</assistant>"
                            "<user>Q: 0+0</user><assistant>0</assistant><user>Q: 3+3</user><assistant>")
    assert third.extra["style"] == "chat" and third.extra["output_tokens"] == 2


def test_evaluate_uses_the_confidence_level(gen_task) -> None:  # type: ignore[no-untyped-def]
    engine = AnswerBook({"1+1": "2", "2+2": "4"})
    result, _ = evaluate_task(engine, gen_task, "m", "chat", confidence=0.5)
    assert (result.ci_low, result.ci_high) == pytest.approx(clopper_pearson_interval(2, 5, 0.5))
    result, _ = evaluate_task(engine, gen_task, "m", "chat", confidence=0.5, ci_method="wilson")
    assert (result.ci_low, result.ci_high) == pytest.approx(wilson_interval(2, 5, 0.5))


def test_evaluate_multiple_choice_picks_the_likeliest(choice_task) -> None:  # type: ignore[no-untyped-def]
    engine = AnswerBook(prefer={"awful": "negative", "great": "positive", "literally": "negative"})
    ticks: list[int] = []
    result, records = evaluate_task(engine, choice_task, "m", "plain", progress=ticks.append)
    assert len(engine.loglikelihood_calls) == 1 and len(engine.loglikelihood_calls[0]) == 8
    assert [r.output for r in records] == ["positive", "negative", "negative", "negative"]
    assert result.item_scores == {"r1": 1.0, "r2": 1.0, "r3": 0.0, "r4": 1.0}
    assert result.metric == "choice_accuracy" and result.value == 0.75
    assert records[1].extra["logprobs"] == {"positive": -2.0, "negative": -0.5}
    assert records[1].prompt == "Review: fine => positive\n\nReview: awful service"
    assert ticks == [1, 1, 1, 1]  # per item, though the engine reported per request


def test_graded_metric_gets_the_policys_interval(tmp_path: Path) -> None:
    """The interval the selection will judge it by (stats.mean_interval): Clopper-Pearson on the sum
    by default, the bootstrap with ci_method=bootstrap. It used to be the bootstrap whatever the policy
    said, while the decision used Wilson (issue 22)."""
    spec = GENERATE.replace("max_new_tokens: 6", "metric: f1").replace("fewshot: {n: 2, data: shots.jsonl}\n", "")
    rows = [{"id": f"q{i}", "question": f"name {i}", "answer": "Ada Lovelace"} for i in range(6)]
    [task] = load_evalset(write(tmp_path, spec, rows, []))
    engine = AnswerBook({"name 0": "Ada Lovelace", "name 1": "Ada", "name 2": "Lovelace", "name 3": "nobody"})
    result, _ = evaluate_task(engine, task, "m", "chat")
    assert result.ci_method == "exact"
    assert result.value == pytest.approx((1 + 2 / 3 + 2 / 3) / 6)
    assert result.ci_low < result.value < result.ci_high
    result, _ = evaluate_task(engine, task, "m", "chat", ci_method="bootstrap")
    assert result.ci_method == "bootstrap" and result.ci_low < result.value < result.ci_high


def test_code_task_runs_the_output_in_the_sandbox(tmp_path: Path) -> None:
    spec = """\
type: generate
data: t.jsonl
prompt:
  chat: "Q: write {{ signature }}"
  plain: |
    {{ signature }}
        # Q: {{ signature }}
target: "{{ solution }}"
metric: code_tests
metric_args: {prepend_prompt: true}
"""
    rows = [
        {"id": "c1", "signature": "def inc(x):", "solution": "def inc(x):\n    return x + 1", "tests": "assert inc(1) == 2"},
        {"id": "c2", "signature": "def dec(x):", "solution": "def dec(x):\n    return x - 1", "tests": "assert dec(1) == 0"},
    ]
    [task] = load_evalset(write(tmp_path, spec, rows, []))
    chat = AnswerBook({"write def inc(x):": "```python\ndef inc(x):\n    return x + 1\n```",
                       "write def dec(x):": "```python\ndef dec(x):\n    return x + 1\n```"})
    result, records = evaluate_task(chat, task, "m", "chat")
    assert result.item_scores == {"c1": 1.0, "c2": 0.0}
    assert "AssertionError" in records[1].extra["stderr_tail"]
    plain = AnswerBook({"def inc(x):": "    return x + 1", "def dec(x):": "    return x - 1"})
    result, _ = evaluate_task(plain, task, "m", "plain")
    assert result.item_scores == {"c1": 1.0, "c2": 1.0}


def test_engine_returning_too_few_results_is_an_error(gen_task) -> None:  # type: ignore[no-untyped-def]
    class Short(AnswerBook):
        def generate(self, requests, progress=None):  # type: ignore[no-untyped-def]
            return super().generate(requests[:-1])

    with pytest.raises(RuntimeError, match="returned 4 generations for 5 requests"):
        evaluate_task(Short(), gen_task, "m", "chat")


# ---- scores that are not scores (issue 36, point 7) ----


@pytest.mark.parametrize("bad", [float("nan"), None, 1.5, -0.1, float("inf"), "1"])
def test_a_metric_returning_anything_but_a_number_in_0_1_is_an_error_naming_task_item_and_metric(
        gen_task, monkeypatch, bad) -> None:  # type: ignore[no-untyped-def]
    """A custom metric returning NaN used to poison the task (rejected at "nan%"; the early stop never
    fired; the item store wrote null and dropped it on reload), and None raised a ValidationError."""
    from selector.tasks.metrics import InvalidScoreError, Metric

    def third_is_bad(x, args):  # type: ignore[no-untyped-def]
        return bad if x.output == "7" else float(x.output == x.target)

    custom = Metric("custom", True, True, third_is_bad)
    monkeypatch.setattr("selector.tasks.evaluate.get_metric", lambda name: custom)  # a metric of the user's own
    gen_task.metric = "custom"
    engine = AnswerBook({"1+1": "2", "2+2": "4", "3+3": "7", "4+4": "8", "5+5": "10"})
    with pytest.raises(InvalidScoreError) as e:
        evaluate_task(engine, gen_task, "m", "chat")
    assert "task 't', item 'q3': metric 'custom' returned" in str(e.value) and repr(bad) in str(e.value)
    assert [r.id for r in e.value.kept] == ["q1", "q2"]  # scored before it: the caller keeps them


def test_check_score_takes_numbers_in_0_1_of_any_kind() -> None:
    import numpy as np

    from selector.tasks.metrics import InvalidScoreError, check_score

    assert [check_score(v, "t", "i", "m") for v in (0, 1, 0.25, True, np.float64(0.5))] == [0.0, 1.0, 0.25, 1.0, 0.5]
    with pytest.raises(InvalidScoreError, match="metric 'm' returned nan"):
        check_score(float("nan"), "t", "i", "m")
