"""Importing tasks written for lm-evaluation-harness: the prompts lm-eval would build, its answer
rules (an index into the choices), its defaults, and clear refusals of what selector cannot run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from selector.errors import EvalsetError
from selector.tasks import load_evalset
from selector.tasks.lmeval import import_task, import_to_folder
from selector.tasks.prompts import build_prompt

REVIEWS = [{"text": "Great soup.", "label": 0}, {"text": "Cold and late.", "label": 1}, {"text": "Fine.", "label": 0}]
SHOTS = [{"text": "Loved it.", "label": 0}, {"text": "Awful.", "label": 1}, {"text": "Superb.", "label": 0}]

SENTIMENT = """\
task: review_sentiment
dataset_path: json
dataset_kwargs:
  data_files:
    test: data/test.jsonl
    train: data/train.jsonl
test_split: test
fewshot_split: train
num_fewshot: 2
output_type: multiple_choice
doc_to_text: "Review: {{text}}\\nSentiment:"
doc_to_target: label
doc_to_choice: ["positive", "negative"]
metric_list:
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
  - metric: acc
"""


def _task(folder: Path, text: str, files: dict[str, list[dict]], name: str = "task.yaml") -> Path:
    for rel, rows in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / name).write_text(text)
    return folder / name


def test_multiple_choice_task_with_index_labels(tmp_path: Path) -> None:
    path = _task(tmp_path, SENTIMENT, {"data/test.jsonl": REVIEWS, "data/train.jsonl": SHOTS})
    imported = import_task(path)
    assert imported.spec["choices"] == ["positive", "negative"]
    assert imported.spec["target"] == "{{ _target }}"  # label 0/1 is an index in lm-eval
    assert [r["_target"] for r in imported.rows] == ["positive", "negative", "positive"]
    assert imported.spec["metric"] == "choice_accuracy" and imported.spec["metric_args"] == {"normalize": "chars"}
    assert imported.spec["id_field"] == "_id" and [r["_id"] for r in imported.rows] == ["0", "1", "2"]
    assert any("first, acc_norm" in n for n in imported.notes)
    assert any("at random" in n for n in imported.notes)  # lm-eval's default sampler is random

    [(written, _)] = import_to_folder([path], tmp_path / "evalset")
    task = load_evalset(written.parent)[0]
    # lm-eval's plain context: shots as text + " " + answer, joined by a blank line, then the item.
    expected = ("Review: Loved it.\nSentiment: positive\n\nReview: Awful.\nSentiment: negative\n\n"
                "Review: Cold and late.\nSentiment:")
    assert build_prompt(task, task.items[1], "plain") == expected
    assert task.prompt_style == "plain" and task.choices == ["positive", "negative"]


def test_choices_from_a_template_and_a_generate_task_with_defaults(tmp_path: Path) -> None:
    rows = [{"q": "Capital of France?", "a": "Paris", "b": "Lyon", "gold": "Paris", "id": "q1"},
            {"q": "Capital of Peru?", "a": "Cusco", "b": "Lima", "gold": "Lima", "id": "q2"}]
    mc = _task(tmp_path, "task: caps\ndataset_path: json\ndataset_kwargs: {data_files: caps.json}\ntest_split: train\n"
               "output_type: multiple_choice\ndoc_to_text: '{{q}}'\ndoc_to_choice: '{{[a, b]}}'\ndoc_to_target: gold\n",
               {"caps.json": rows}, "caps.yaml")
    imported = import_task(mc)
    assert imported.spec["choices_field"] == "_choices" and [r["_choices"] for r in imported.rows] == [
        ["Paris", "Lyon"], ["Cusco", "Lima"]]
    assert imported.spec["target"] == "{{ gold }}" and imported.spec["id_field"] == "id"

    gen = _task(tmp_path, "task: caps_gen\ndataset_path: json\ndataset_kwargs: {data_files: caps.json}\ntest_split: train\n"
                "doc_to_text: 'Q: {{q}}\\nA:'\ndoc_to_target: '{{gold}}'\n", {}, "gen.yaml")
    spec = import_task(gen).spec
    assert spec["type"] == "generate" and spec["metric"] == "exact_match"
    assert spec["stop"] == ["\n\n"] and spec["max_new_tokens"] == 256  # lm-eval's defaults
    assert spec["metric_args"] == {"ignore_case": False, "strip": False}  # lm-eval compares the raw output


def test_json_array_files_numbers_and_booleans_keep_their_text(tmp_path: Path) -> None:
    (tmp_path / "d.json").write_text(json.dumps({"rows": [{"id": 7, "x": 3.50, "ok": True, "when": "2018-03-13"}]})
                                     .replace("3.5", "3.50"))
    path = tmp_path / "t.yaml"
    path.write_text("task: t\ndataset_path: json\ndataset_kwargs: {data_files: {test: d.json}, field: rows}\n"
                    "test_split: test\ndoc_to_text: '{{x}} {{ok}} {{when}}'\ndoc_to_target: when\n")
    imported = import_task(path)
    assert imported.rows == [{"id": "7", "x": "3.50", "ok": "true", "when": "2018-03-13"}]
    [(written, _)] = import_to_folder([path], tmp_path / "out")
    item = load_evalset(written.parent)[0].items[0]
    assert item.prompts["plain"] == "3.50 true 2018-03-13" and item.targets["plain"] == "2018-03-13"


def test_csv_and_include_are_read(tmp_path: Path) -> None:
    (tmp_path / "d.csv").write_text("id,question,answer\na,2+2?,4\n")
    (tmp_path / "_base.yaml").write_text("dataset_path: csv\ntest_split: test\ndoc_to_text: '{{question}}'\n"
                                         "doc_to_target: answer\ngeneration_kwargs: {until: [\"\\n\"], max_gen_toks: 5}\n")
    path = tmp_path / "t.yaml"
    path.write_text("include: _base.yaml\ntask: sums\ndataset_kwargs: {data_files: {test: d.csv}}\n")
    spec = import_task(path).spec
    got = (spec["prompt"], spec["target"], spec["stop"], spec["max_new_tokens"])
    assert got == ("{{question}}", "{{ answer }}", ["\n"], 5)


@pytest.mark.parametrize(("extra", "key", "message"), [
    ("process_docs: !function utils.process_docs\n", "process_docs", "Python code"),
    ("metric_list: [{metric: bleu}]\n", "metric_list", "Hub"),
    ("output_type: loglikelihood\n", "output_type", "cannot be imported"),
    ("num_fewshot: 2\n", "num_fewshot", "another split"),
])
def test_what_selector_cannot_run_is_refused_with_file_line_and_key(tmp_path: Path, extra: str, key: str,
                                                                      message: str) -> None:
    _task(tmp_path, "task: t\ndataset_path: json\ndataset_kwargs: {data_files: {test: d.jsonl}}\ntest_split: test\n"
          "doc_to_text: '{{q}}'\ndoc_to_target: a\n" + extra, {"d.jsonl": [{"q": "x", "a": "y"}]})
    with pytest.raises(EvalsetError, match=message) as e:
        import_task(tmp_path / "task.yaml")
    assert e.value.field == key and e.value.path.endswith("task.yaml")
    lines = (tmp_path / "task.yaml").read_text().splitlines()
    assert e.value.line == next(n for n, line in enumerate(lines, 1) if line.startswith(key))  # the key's own line


def test_hub_datasets_nested_values_and_list_targets_are_refused(tmp_path: Path) -> None:
    (tmp_path / "hub.yaml").write_text("task: h\ndataset_path: gsm8k\ndataset_name: main\ndoc_to_text: q\n")
    with pytest.raises(EvalsetError, match="local files only"):
        import_task(tmp_path / "hub.yaml")
    _task(tmp_path, "task: n\ndataset_path: json\ndataset_kwargs: {data_files: {test: n.jsonl}}\ntest_split: test\n"
          "doc_to_text: '{{q}}'\ndoc_to_target: a\n", {"n.jsonl": [{"q": "x", "a": {"text": "y"}}]}, "n.yaml")
    with pytest.raises(EvalsetError, match="dict values cannot be imported") as e:
        import_task(tmp_path / "n.yaml")
    assert e.value.line == 1 and e.value.field == "a"
    _task(tmp_path, "task: l\ndataset_path: json\ndataset_kwargs: {data_files: {test: l.jsonl}}\ntest_split: test\n"
          "doc_to_text: '{{q}}'\ndoc_to_target: \"{{ [a, a] }}\"\n", {"l.jsonl": [{"q": "x", "a": "y"}]}, "l.yaml")
    with pytest.raises(EvalsetError, match="several gold answers"):
        import_task(tmp_path / "l.yaml")
