"""Loading eval sets: values kept as written, and every bad input named by file, line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from selector.errors import EvalsetError
from selector.tasks import evalset_hash, load_evalset

GENERATE = """\
description: d
type: generate
data: t.jsonl
prompt: "Q: {{ question }}"
target: "{{ answer }}"
"""

CHOICE = """\
type: multiple_choice
data: t.jsonl
prompt: "Review: {{ text }}"
target: "{{ label }}"
choices: [positive, negative]
"""


def make(tmp_path: Path, spec: str = GENERATE, rows: list[dict] | str | bytes | None = None,
         name: str = "t", data_name: str = "t.jsonl") -> Path:
    """An eval set folder with one task file and its rows."""
    (tmp_path / f"{name}.yaml").write_text(spec)
    if rows is None:
        rows = [{"id": "a", "question": "1+1", "answer": "2"}, {"id": "b", "question": "2+2", "answer": "4"}]
    if isinstance(rows, list):
        rows = "".join(json.dumps(r) + "\n" for r in rows)
    (tmp_path / data_name).write_bytes(rows if isinstance(rows, bytes) else rows.encode())
    return tmp_path


def error(tmp_path: Path, **kwargs: object) -> EvalsetError:
    with pytest.raises(EvalsetError) as info:
        load_evalset(tmp_path, **kwargs)  # type: ignore[arg-type]
    return info.value


# ---- what loads, and how ----


def test_loads_items_in_file_order_with_lines_and_defaults(tmp_path: Path) -> None:
    [task] = load_evalset(make(tmp_path))
    assert task.name == "t" and task.type == "generate" and task.metric == "exact_match"
    assert [(i.id, i.line) for i in task.items] == [("a", 1), ("b", 2)]
    assert task.items[0].prompts == {"chat": "Q: 1+1", "plain": "Q: 1+1"}
    assert task.items[1].targets["plain"] == "4"
    assert task.max_new_tokens == 32 and task.target_delimiter == " " and task.fewshot_delimiter == "\n\n"
    assert task.metric_args == {"ignore_case": False, "strip": True, "strip_punctuation": False, "first_line": False}


def test_values_reach_prompts_exactly_as_written(tmp_path: Path) -> None:
    raw = (
        '{"id": 7, "question": "When? {{ secret }} {% if x %}<b>&amp;", "answer": "2018-03-13"}\n'
        '{"id": "8", "question": 3.50, "answer": 1e3}\n'
        '{"id": "9", "question": "007", "answer": -0.0}\n'
    )
    [task] = load_evalset(make(tmp_path, rows=raw))
    first, second, third = task.items
    assert first.id == "7"  # a JSON number id keeps its text
    assert first.prompts["chat"] == "Q: When? {{ secret }} {% if x %}<b>&amp;"  # literal, not escaped
    assert first.targets["chat"] == "2018-03-13"  # not a timestamp
    assert second.prompts["chat"] == "Q: 3.50" and second.targets["chat"] == "1e3"
    assert third.fields["question"] == "007" and third.targets["chat"] == "-0.0"


def test_blank_lines_and_a_bom_are_fine(tmp_path: Path) -> None:
    raw = '\ufeff{"id": "a", "question": "q", "answer": "x"}\n\n   \n{"id": "b", "question": "q", "answer": "y"}\n'
    [task] = load_evalset(make(tmp_path, rows=raw))
    assert [(i.id, i.line) for i in task.items] == [("a", 1), ("b", 4)]


def test_trailing_newline_of_a_template_is_kept(tmp_path: Path) -> None:
    spec = GENERATE.replace('prompt: "Q: {{ question }}"', "prompt: |\n  Q: {{ question }}\n")
    [task] = load_evalset(make(tmp_path, spec))
    assert task.items[0].prompts["plain"] == "Q: 1+1\n"


def test_per_style_prompt_target_and_stop(tmp_path: Path) -> None:
    spec = GENERATE.replace(
        'prompt: "Q: {{ question }}"',
        'prompt: {chat: "Please: {{ question }}", plain: "Q: {{ question }}\\nA:"}\nstop: {plain: ["\\n"]}',
    ).replace('target: "{{ answer }}"', 'target: {chat: "It is {{ answer }}", plain: "{{ answer }}"}')
    [task] = load_evalset(make(tmp_path, spec))
    item = task.items[0]
    assert item.prompts == {"chat": "Please: 1+1", "plain": "Q: 1+1\nA:"}
    assert item.targets == {"chat": "It is 2", "plain": "2"}
    assert task.stop == {"chat": [], "plain": ["\n"]}


def test_tasks_sorted_filtered_and_limited(tmp_path: Path) -> None:
    make(tmp_path, name="zeta")
    (tmp_path / "alpha.yaml").write_text(GENERATE)
    assert [t.name for t in load_evalset(tmp_path)] == ["alpha", "zeta"]
    [only] = load_evalset(tmp_path, tasks=["zeta"], limit=1)
    assert only.name == "zeta" and [i.id for i in only.items] == ["a"]


def test_name_from_yaml_overrides_the_file_stem(tmp_path: Path) -> None:
    [task] = load_evalset(make(tmp_path, "name: renamed\n" + GENERATE))
    assert task.name == "renamed"


def test_multiple_choice_with_fixed_choices(tmp_path: Path) -> None:
    rows = [{"id": "1", "text": "great", "label": "positive"}, {"id": "2", "text": "awful", "label": "negative"}]
    [task] = load_evalset(make(tmp_path, CHOICE, rows))
    assert task.metric == "choice_accuracy" and task.choices == ["positive", "negative"]
    assert task.choices_for(task.items[1]) == ["positive", "negative"]


def test_multiple_choice_with_choices_from_a_row_field(tmp_path: Path) -> None:
    spec = CHOICE.replace("choices: [positive, negative]", "choices_field: options").replace(
        'prompt: "Review: {{ text }}"', 'prompt: "{{ text }} ({{ options | join(\'/\') }})"')
    rows = [{"id": "1", "text": "pick", "label": "b", "options": ["a", "b", "c"]}]
    [task] = load_evalset(make(tmp_path, spec, rows))
    assert task.choices_for(task.items[0]) == ["a", "b", "c"]
    assert task.items[0].prompts["chat"] == "pick (a/b/c)"
    assert "options" not in task.items[0].fields


def test_fewshot_takes_the_first_n_rows(tmp_path: Path) -> None:
    spec = GENERATE + "fewshot: {n: 2, data: shots.jsonl}\n"
    make(tmp_path, spec)
    shots = [{"question": f"s{i}", "answer": str(i)} for i in range(4)]
    (tmp_path / "shots.jsonl").write_text("".join(json.dumps(r) + "\n" for r in shots))
    [task] = load_evalset(tmp_path)
    assert [ex.prompts["plain"] for ex in task.fewshot] == ["Q: s0", "Q: s1"]
    assert task.fewshot[0].id == "shots.jsonl:1"


# ---- CSV and Parquet ----


def test_csv_values_stay_strings_with_real_line_numbers(tmp_path: Path) -> None:
    spec = GENERATE.replace("t.jsonl", "t.csv")
    csv_text = 'id,question,answer\n1,"multi\nline",2018-03-13\n\n2,0.50,007\n'
    [task] = load_evalset(make(tmp_path, spec, csv_text, data_name="t.csv"))
    assert [(i.id, i.line) for i in task.items] == [("1", 2), ("2", 5)]
    assert task.items[0].fields["question"] == "multi\nline"
    assert task.items[0].targets["chat"] == "2018-03-13"
    assert task.items[1].fields == {"id": "2", "question": "0.50", "answer": "007"}


def test_csv_list_field_is_a_json_array(tmp_path: Path) -> None:
    spec = CHOICE.replace("t.jsonl", "t.csv").replace("choices: [positive, negative]", "choices_field: options")
    csv_text = 'id,text,label,options\n1,hi,yes,"[""yes"", ""no""]"\n'
    [task] = load_evalset(make(tmp_path, spec, csv_text, data_name="t.csv"))
    assert task.choices_for(task.items[0]) == ["yes", "no"]


def test_csv_wrong_number_of_values(tmp_path: Path) -> None:
    spec = GENERATE.replace("t.jsonl", "t.csv")
    e = error(make(tmp_path, spec, "id,question,answer\n1,q,a\n2,q\n", data_name="t.csv"))
    assert e.path.endswith("t.csv") and e.line == 3 and "2 values for 3 header columns" in e.problem


def test_parquet_columns_are_read_as_strings(tmp_path: Path) -> None:
    import datetime

    import pyarrow as pa
    import pyarrow.parquet as pq

    spec = GENERATE.replace("t.jsonl", "t.parquet")
    make(tmp_path, spec, "", data_name="t.parquet")
    table = pa.table({
        "id": ["x", "y"],
        "question": pa.array([12, 7], pa.int64()),
        "answer": pa.array([datetime.date(2018, 3, 13), datetime.date(2020, 1, 2)]),
    })
    pq.write_table(table, tmp_path / "t.parquet")
    [task] = load_evalset(tmp_path)
    assert [(i.id, i.line) for i in task.items] == [("x", 1), ("y", 2)]
    assert task.items[0].prompts["chat"] == "Q: 12" and task.items[0].targets["chat"] == "2018-03-13"


def test_parquet_null_is_an_error(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    make(tmp_path, GENERATE.replace("t.jsonl", "t.parquet"), "", data_name="t.parquet")
    pq.write_table(pa.table({"id": ["x", "y"], "question": ["q", None], "answer": ["1", "2"]}), tmp_path / "t.parquet")
    e = error(tmp_path)
    assert e.line == 2 and e.field == "question" and "null" in e.problem


def test_unreadable_parquet(tmp_path: Path) -> None:
    e = error(make(tmp_path, GENERATE.replace("t.jsonl", "t.parquet"), b"not parquet", data_name="t.parquet"))
    assert e.path.endswith("t.parquet") and "not a readable Parquet file" in e.problem


# ---- errors in rows ----


def test_bad_json_names_the_line(tmp_path: Path) -> None:
    raw = '{"id": "a", "question": "q", "answer": "1"}\n{"id": "b", "question": "q", \n'
    e = error(make(tmp_path, rows=raw))
    assert e.path.endswith("t.jsonl") and e.line == 2 and "bad JSON" in e.problem
    assert "t.jsonl:2:" in str(e)


def test_row_that_is_not_an_object(tmp_path: Path) -> None:
    e = error(make(tmp_path, rows='["id", "a"]\n'))
    assert e.line == 1 and "must be a JSON object, got list" in e.problem


def test_duplicate_key_in_a_row(tmp_path: Path) -> None:
    e = error(make(tmp_path, rows='{"id": "a", "question": "q", "answer": "1", "answer": "2"}\n'))
    assert e.line == 1 and e.field == "answer" and "twice" in e.problem


def test_missing_field_used_by_the_template(tmp_path: Path) -> None:
    rows = [{"id": "a", "question": "q", "answer": "1"}, {"id": "b", "answer": "2"}]
    e = error(make(tmp_path, rows=rows))
    assert e.line == 2 and e.field == "question" and "used by the prompt template" in e.problem


@pytest.mark.parametrize(
    "value, kind", [(True, "a boolean"), (None, "null"), ({"a": "b"}, "an object"), (["x"], "a list")]
)
def test_wrong_value_types(tmp_path: Path, value: object, kind: str) -> None:
    e = error(make(tmp_path, rows=[{"id": "a", "question": value, "answer": "1"}]))
    assert e.line == 1 and e.field == "question" and f"must be a string (numbers are kept as written), got {kind}" in e.problem


def test_lone_surrogate_is_rejected(tmp_path: Path) -> None:
    e = error(make(tmp_path, rows='{"id": "a", "question": "bad \\ud800 here", "answer": "1"}\n'))
    assert e.field == "question" and "lone surrogate" in e.problem


@pytest.mark.parametrize("bad_id", ["", "   "])
def test_empty_id(tmp_path: Path, bad_id: str) -> None:
    e = error(make(tmp_path, rows=[{"id": bad_id, "question": "q", "answer": "1"}]))
    assert e.field == "id" and "non-empty string" in e.problem


def test_missing_id(tmp_path: Path) -> None:
    e = error(make(tmp_path, rows=[{"question": "q", "answer": "1"}]))
    assert e.line == 1 and e.field == "id" and "missing id field" in e.problem


def test_custom_id_field(tmp_path: Path) -> None:
    [task] = load_evalset(make(tmp_path, GENERATE + "id_field: key\n", [{"key": "k1", "question": "q", "answer": "1"}]))
    assert task.items[0].id == "k1"


def test_duplicate_ids(tmp_path: Path) -> None:
    rows = [{"id": "a", "question": "q", "answer": "1"}, {"id": "b", "question": "q", "answer": "1"},
            {"id": "a", "question": "r", "answer": "2"}]
    e = error(make(tmp_path, rows=rows))
    assert e.line == 3 and e.field == "id" and "duplicate id 'a' (first on line 1)" in e.problem


def test_empty_task(tmp_path: Path) -> None:
    e = error(make(tmp_path, rows="\n\n"))
    assert e.path.endswith("t.jsonl") and "has no rows" in e.problem


def test_non_utf8_bytes(tmp_path: Path) -> None:
    raw = b'{"id": "a", "question": "q", "answer": "1"}\n{"id": "b", "question": "caf\xe9", "answer": "1"}\n'
    e = error(make(tmp_path, rows=raw))
    assert e.line == 2 and "not valid UTF-8" in e.problem


def test_row_over_one_megabyte(tmp_path: Path) -> None:
    rows = [{"id": "a", "question": "q", "answer": "1"}, {"id": "b", "question": "x" * (1 << 20), "answer": "1"}]
    e = error(make(tmp_path, rows=rows))
    assert e.line == 2 and "byte limit for one row" in e.problem


def test_target_not_in_choices(tmp_path: Path) -> None:
    rows = [{"id": "1", "text": "ok", "label": "positive"}, {"id": "2", "text": "meh", "label": "neutral"}]
    e = error(make(tmp_path, CHOICE, rows))
    assert e.path.endswith("t.jsonl") and e.line == 2 and "'neutral' is not one of the choices" in e.problem


def test_target_not_in_the_rows_own_choices(tmp_path: Path) -> None:
    spec = CHOICE.replace("choices: [positive, negative]", "choices_field: options")
    e = error(make(tmp_path, spec, [{"id": "1", "text": "t", "label": "z", "options": ["a", "b"]}]))
    assert e.line == 1 and "'z' is not one of the choices" in e.problem


def test_choices_field_must_hold_a_list(tmp_path: Path) -> None:
    spec = CHOICE.replace("choices: [positive, negative]", "choices_field: options")
    e = error(make(tmp_path, spec, [{"id": "1", "text": "t", "label": "a", "options": "a,b"}]))
    assert e.line == 1 and e.field == "options" and "must be a list of strings" in e.problem


def test_template_runtime_error_names_the_row(tmp_path: Path) -> None:
    spec = GENERATE.replace('prompt: "Q: {{ question }}"', 'prompt: "Q: {{ question.missing_attribute }}"')
    e = error(make(tmp_path, spec))
    assert e.line == 1 and "cannot render the prompt template" in e.problem


def test_numeric_target_checked_at_load(tmp_path: Path) -> None:
    rows = [{"id": "a", "question": "q", "answer": "12"}, {"id": "b", "question": "q", "answer": "twelve"}]
    e = error(make(tmp_path, GENERATE + "metric: numeric\n", rows))
    assert e.line == 2 and "exactly one number" in e.problem


def test_code_tests_needs_the_tests_field_in_every_row(tmp_path: Path) -> None:
    e = error(make(tmp_path, GENERATE + "metric: code_tests\n"))
    assert e.line == 1 and e.field == "tests" and "used by the metric" in e.problem


def test_empty_prompt(tmp_path: Path) -> None:
    e = error(make(tmp_path, rows=[{"id": "a", "question": "", "answer": "1"}],
                   spec=GENERATE.replace('"Q: {{ question }}"', '"{{ question }}"')))
    assert e.line == 1 and "empty" in e.problem


# ---- errors in the task file ----


def line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if line.startswith(text))


def test_unknown_yaml_key_with_suggestion(tmp_path: Path) -> None:
    e = error(make(tmp_path, GENERATE + "max_new_token: 5\n"))
    assert e.path.endswith("t.yaml") and e.field == "max_new_token"
    assert e.line == line_of(tmp_path / "t.yaml", "max_new_token") and "Did you mean 'max_new_tokens'?" in e.problem


def test_unknown_metric_with_suggestion(tmp_path: Path) -> None:
    e = error(make(tmp_path, GENERATE + "metric: exact_mach\n"))
    assert e.field == "metric" and e.line == 6 and "Did you mean 'exact_match'" in e.problem


def test_metric_that_does_not_fit_the_task_type(tmp_path: Path) -> None:
    e = error(make(tmp_path, CHOICE + "metric: exact_match\n"))
    assert e.field == "metric" and "use choice_accuracy" in e.problem
    e = error(make(tmp_path, GENERATE + "metric: choice_accuracy\n"))
    assert e.field == "metric" and "does not score generate tasks" in e.problem


def test_bad_metric_args_point_at_the_argument(tmp_path: Path) -> None:
    e = error(make(tmp_path, GENERATE + "metric_args:\n  ignore_case: true\n  strip_punct: true\n"))
    assert e.field == "metric_args" and e.line == 8 and "takes no argument 'strip_punct'" in e.problem


def test_missing_data_file(tmp_path: Path) -> None:
    make(tmp_path)
    (tmp_path / "t.jsonl").unlink()
    e = error(tmp_path)
    assert e.path.endswith("t.yaml") and e.field == "data" and e.line == 3 and "data file not found" in e.problem


def test_unsupported_data_suffix(tmp_path: Path) -> None:
    e = error(make(tmp_path, GENERATE.replace("t.jsonl", "t.txt"), data_name="t.txt"))
    assert e.field == "data" and "must end in one of .jsonl, .csv, .parquet" in e.problem


def test_missing_required_keys(tmp_path: Path) -> None:
    e = error(make(tmp_path, GENERATE.replace('target: "{{ answer }}"\n', "")))
    assert e.field == "target" and "is required" in e.problem


@pytest.mark.parametrize(
    "extra, field, problem",
    [
        ("max_new_tokens: '8'\n", "max_new_tokens", "must be an integer >= 1"),
        ("max_new_tokens: 0\n", "max_new_tokens", "must be an integer >= 1"),
        ("stop: '\\n'\n", "stop", "must be a list of strings"),
        ("stop: ['']\n", "stop", "empty stop sequence"),
        ("prompt_style: fancy\n", "prompt_style", "must be one of model, chat, plain"),
        ("prompt_style_overrides: {smollm2-135m: html}\n", "prompt_style_overrides", "chat or plain"),
        ("system: 3\n", "system", "must be a string"),
        ("target_delimiter: 1\n", "target_delimiter", "must be a string (quote it"),
        ("fewshot: {n: 2}\n", "fewshot", "data must name a file"),
        ("fewshot: {n: 2, data: t.jsonl, seed: 1}\n", "fewshot", "unknown key 'seed'"),
        ("choices: [a, b]\n", "choices", "only multiple_choice tasks have choices"),
    ],
)
def test_wrong_types_in_the_task_file(tmp_path: Path, extra: str, field: str, problem: str) -> None:
    e = error(make(tmp_path, GENERATE + extra))
    assert e.path.endswith("t.yaml") and e.field == field and problem in e.problem
    assert e.line == line_of(tmp_path / "t.yaml", field)


def test_yes_no_choices_read_as_booleans_get_a_quoting_hint(tmp_path: Path) -> None:
    e = error(make(tmp_path, CHOICE.replace("[positive, negative]", "[yes, no]")))
    assert e.field == "choices" and "quote it" in e.problem and e.line == 5


def test_prompt_mapping_needs_both_styles(tmp_path: Path) -> None:
    spec = GENERATE.replace('prompt: "Q: {{ question }}"', 'prompt: {chat: "x {{ question }}"}')
    e = error(make(tmp_path, spec))
    assert e.field == "prompt" and "exactly the keys chat and plain" in e.problem


def test_template_syntax_error(tmp_path: Path) -> None:
    e = error(make(tmp_path, GENERATE.replace('"Q: {{ question }}"', '"Q: {{ question "')))
    assert e.field == "prompt" and e.line == 4 and "template error" in e.problem


def test_bad_yaml_names_the_line(tmp_path: Path) -> None:
    e = error(make(tmp_path, GENERATE + "metric: [unclosed\n"))
    assert e.path.endswith("t.yaml") and e.line is not None and e.line >= 6 and "bad YAML" in e.problem


def test_duplicate_yaml_key(tmp_path: Path) -> None:
    e = error(make(tmp_path, GENERATE + "type: multiple_choice\n"))
    assert e.field == "type" and e.line == 6 and "twice" in e.problem


def test_task_file_that_is_not_a_mapping(tmp_path: Path) -> None:
    e = error(make(tmp_path, "- a\n- b\n"))
    assert "must be a YAML mapping" in e.problem


def test_bad_task_name(tmp_path: Path) -> None:
    e = error(make(tmp_path, "name: 'has space'\n" + GENERATE))
    assert e.field == "name" and e.line == 1


def test_duplicate_task_names(tmp_path: Path) -> None:
    make(tmp_path, name="one")
    (tmp_path / "two.yaml").write_text("name: one\n" + GENERATE)
    e = error(tmp_path)
    assert e.path.endswith("two.yaml") and e.field == "name" and "also used by one.yaml" in e.problem


def test_fewshot_needs_enough_rows(tmp_path: Path) -> None:
    make(tmp_path, GENERATE + "fewshot: {n: 5, data: shots.jsonl}\n")
    (tmp_path / "shots.jsonl").write_text(json.dumps({"question": "s", "answer": "1"}) + "\n")
    e = error(tmp_path)
    assert e.field == "fewshot" and "n is 5 but shots.jsonl has 1 rows" in e.problem


def test_fewshot_example_that_is_also_scored_is_refused(tmp_path: Path) -> None:
    make(tmp_path, GENERATE + "fewshot: {n: 1, data: shots.jsonl}\n")
    (tmp_path / "shots.jsonl").write_text(json.dumps({"question": "2+2", "answer": "4"}) + "\n")
    e = error(tmp_path)
    assert e.path.endswith("shots.jsonl") and e.line == 1 and "also scored item 'b'" in e.problem


# ---- errors about the folder and the selection ----


def test_missing_folder(tmp_path: Path) -> None:
    e = error(tmp_path / "nope")
    assert "eval set folder not found" in e.problem


def test_folder_without_task_files(tmp_path: Path) -> None:
    assert "no task files" in error(tmp_path).problem


def test_unknown_task_name_suggests_close_ones(tmp_path: Path) -> None:
    make(tmp_path, name="arithmetic")
    e = error(tmp_path, tasks=["arithmetc"])
    assert e.field == "tasks" and "Did you mean 'arithmetic'?" in e.problem


@pytest.mark.parametrize("limit", [0, -1, 1.5, True])
def test_bad_limit(tmp_path: Path, limit: object) -> None:
    assert error(make(tmp_path), limit=limit).field == "limit"


# ---- the content hash ----


def test_hash_is_stable_and_follows_content(tmp_path: Path) -> None:
    first = evalset_hash(load_evalset(make(tmp_path)))
    assert evalset_hash(load_evalset(tmp_path)) == first
    (tmp_path / "t.jsonl").write_text(json.dumps({"id": "a", "question": "1+1", "answer": "3"}) + "\n")
    changed_rows = evalset_hash(load_evalset(tmp_path))
    (tmp_path / "t.yaml").write_text(GENERATE + "max_new_tokens: 4\n")
    changed_spec = evalset_hash(load_evalset(tmp_path))
    assert len({first, changed_rows, changed_spec}) == 3


def test_hash_does_not_depend_on_where_the_folder_is(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    assert evalset_hash(load_evalset(make(a))) == evalset_hash(load_evalset(make(b)))


def test_the_bundled_eval_set_is_found_from_any_working_directory(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from selector.paths import DEFAULT_EVALSET, PACKAGE_DIR
    from selector.tasks.loader import locate_evalset

    monkeypatch.chdir(tmp_path)
    assert DEFAULT_EVALSET == PACKAGE_DIR / "evalsets" / "default"  # package data: a wheel carries it
    assert locate_evalset("evalsets/default") == DEFAULT_EVALSET
    assert {t.name for t in load_evalset("evalsets/default")} == {"arithmetic", "code", "extraction", "sentiment"}
    (tmp_path / "evalsets" / "default").mkdir(parents=True)  # the user's own folder of that name wins
    assert locate_evalset("evalsets/default") == Path("evalsets/default")
    assert locate_evalset("no/such/folder") == Path("no/such/folder")  # and the error names what was asked
