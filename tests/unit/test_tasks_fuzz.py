"""Fuzzing the loader and prompt building: random rows, bytes, YAML and strings (template syntax,
odd unicode, lone surrogates). Every input either loads, with fields reaching prompts literally,
or raises EvalsetError; never another exception."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from selector.errors import EvalsetError
from selector.tasks import build_requests, load_evalset
from selector.tasks.spec import KEYS

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TEMPLATE_BITS = ["{{ text }}", "{{", "}}", "{% if x %}", "{% endfor %}", "{#", "#}", "{{ 7*7 }}", "{{ ''.__class__ }}",
                 "<b>&amp;</b>", "\\n", "\x00", "\u202e", "\ufeff", "\U0001f600", "e\u0301", "\r\n", "\u2028"]
odd_text = st.lists(
    st.one_of(
        st.sampled_from(TEMPLATE_BITS),
        st.text(st.characters(categories=["L", "M", "N", "P", "S", "Z", "C"]), max_size=8),  # incl. surrogates
    ),
    max_size=6,
).map("".join)
clean_text = st.lists(st.one_of(st.sampled_from(TEMPLATE_BITS), st.text(max_size=8)), max_size=6).map("".join)
json_value = st.recursive(
    st.one_of(odd_text, st.integers(), st.floats(), st.booleans(), st.none()),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(odd_text, inner, max_size=3)),
    max_leaves=6,
)
clean_row = st.fixed_dictionaries(
    {"id": clean_text.filter(str.strip), "text": clean_text, "answer": clean_text.filter(str.strip)}
)
row = st.one_of(
    clean_row,
    st.fixed_dictionaries({"id": odd_text, "text": odd_text, "answer": odd_text}),
    st.fixed_dictionaries({"id": json_value, "text": json_value, "answer": json_value}),
    st.dictionaries(st.sampled_from(["id", "text", "answer", "extra"]), json_value, max_size=4),
    json_value,
)

SPEC = """\
type: generate
data: t.jsonl
prompt: {chat: "P: {{ text }}", plain: "Q: {{ text }}\\nA:"}
target: "{{ answer }}"
fewshot: {n: 1, data: shots.jsonl}
"""


def _load(folder: Path) -> list[Any] | None:
    try:
        return load_evalset(folder)
    except EvalsetError:
        return None


def _write_rows(folder: Path, rows: list[Any]) -> list[str]:
    lines = [json.dumps(r, ensure_ascii=True) for r in rows]  # lone surrogates travel as \ud800 escapes
    (folder / "t.jsonl").write_text("\n".join(lines) + "\n")
    return lines


@pytest.mark.slow  # property-based: many generated cases (the full suite runs it)
@FUZZ
@given(rows=st.one_of(
    st.lists(clean_row, min_size=1, max_size=5, unique_by=lambda r: r["id"]),  # mostly loads
    st.lists(row, min_size=1, max_size=5),
))
def test_random_rows_load_literally_or_fail_cleanly(rows: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "t.yaml").write_text(SPEC)
        (folder / "shots.jsonl").write_text(json.dumps({"text": "example", "answer": "ok"}) + "\n")
        _write_rows(folder, rows)
        tasks = _load(folder)
        if tasks is None:
            return
        [task] = tasks
        for item in task.items:
            source = rows[item.line - 1]
            assert item.id == source["id"] if isinstance(source["id"], str) else True
            assert item.prompts["chat"] == "P: " + item.fields["text"]
            assert item.targets["plain"] == item.fields["answer"]
            if isinstance(source["text"], str):
                assert item.fields["text"] == source["text"]
            chat, plain = build_requests(task, "m", "chat"), build_requests(task, "m", "plain")
            index = task.items.index(item)
            assert chat[index].prompt[-1]["content"] == "P: " + item.fields["text"]  # type: ignore[index]
            assert plain[index].prompt.endswith("Q: " + item.fields["text"] + "\nA:")  # type: ignore[union-attr]


@FUZZ
@given(data=st.binary(max_size=400), suffix=st.sampled_from([".jsonl", ".csv"]))
def test_random_bytes_as_data_fail_cleanly(data: bytes, suffix: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "t.yaml").write_text(SPEC.replace("t.jsonl", "t" + suffix).replace("fewshot: {n: 1, data: shots.jsonl}\n", ""))
        (folder / ("t" + suffix)).write_bytes(data)
        _load(folder)


@FUZZ
@given(lines=st.lists(st.one_of(odd_text, st.sampled_from(['{"id": "a", "text": "t", "answer": "x"}', "{", "[]",
                                                             '"str"', "null", '{"id": "a"}', "1e999"])), max_size=6))
def test_random_jsonl_lines_fail_cleanly(lines: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "t.yaml").write_text(SPEC.replace("fewshot: {n: 1, data: shots.jsonl}\n", ""))
        (folder / "t.jsonl").write_text("\n".join(lines), encoding="utf-8", errors="surrogatepass")
        _load(folder)


yaml_value = st.recursive(
    st.one_of(odd_text, st.sampled_from(["t.jsonl", "generate", "multiple_choice", "chat", "plain", "model",
                                         "exact_match", "numeric", "f1", "{{ text }}", "{{ answer }}", "code_tests"]),
              st.integers(-2, 40), st.booleans(), st.none(), st.floats(allow_nan=False)),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.sampled_from(["chat", "plain", "n", "data", "x"]), inner, max_size=3)),
    max_leaves=5,
)


@FUZZ
@given(spec=st.dictionaries(st.sampled_from([*KEYS, "bogus"]), yaml_value, max_size=8))
def test_random_task_specs_fail_cleanly(spec: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        base = {"type": "generate", "data": "t.jsonl", "prompt": "P: {{ text }}", "target": "{{ answer }}"}
        try:
            text = yaml.safe_dump({**base, **spec}, allow_unicode=False)
        except yaml.YAMLError:
            return
        (folder / "t.yaml").write_text(text)
        (folder / "t.jsonl").write_text(json.dumps({"id": "a", "text": "t", "answer": "4"}) + "\n")
        (folder / "x.jsonl").write_text(json.dumps({"id": "b", "text": "u", "answer": "5"}) + "\n")
        tasks = _load(folder)
        if tasks is not None:
            for style in ("chat", "plain"):
                build_requests(tasks[0], "m", style)


@FUZZ
@given(text=st.text(max_size=300))
def test_random_yaml_text_fails_cleanly(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "t.yaml").write_text(text, encoding="utf-8", errors="surrogatepass")
        (folder / "t.jsonl").write_text(json.dumps({"id": "a", "text": "t", "answer": "4"}) + "\n")
        _load(folder)


@FUZZ
@given(template=odd_text)
def test_random_prompt_templates_fail_cleanly(template: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "t.yaml").write_text(yaml.safe_dump(
            {"data": "t.jsonl", "prompt": template, "target": "{{ answer }}"}, allow_unicode=False))
        (folder / "t.jsonl").write_text(json.dumps({"id": "a", "text": "t", "answer": "4"}) + "\n")
        _load(folder)
