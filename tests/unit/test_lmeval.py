"""Export to lm-evaluation-harness YAML and back: same prompts, targets and scoring for every item.

lm-eval itself is not installed here (it pins other libraries); tests/integration/test_lmeval_harness.py
runs the exported tasks in lm-eval's own environment when one is set up.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from selector.errors import EvalsetError
from selector.tasks import get_metric, load_evalset
from selector.tasks.lmeval import export_evalset, export_task, import_task, import_to_folder
from selector.tasks.lmeval.source import FunctionRef, _Loader
from selector.tasks.lmeval.scoring import score
from selector.tasks.metrics import ScoreInput
from selector.tasks.prompts import build_prompt
from selector.paths import DEFAULT_EVALSET

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = DEFAULT_EVALSET


def _load_yaml(path: Path) -> dict:
    return yaml.load(path.read_text(), Loader=_Loader)  # noqa: S506 (SafeLoader + lm-eval's !function tag)


def _write(folder: Path, name: str, text: str, rows: list[dict], fewshot: list[dict] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if fewshot is not None:
        (folder / f"{name}_fewshot.jsonl").write_text("".join(json.dumps(r) + "\n" for r in fewshot))
    path = folder / f"{name}.yaml"
    fewshot_key = f"fewshot: {{n: {len(fewshot)}, data: {name}_fewshot.jsonl}}\n" if fewshot else ""
    path.write_text(f"data: {name}.jsonl\n{fewshot_key}{text}")
    return path


def _same_items(original, imported, style: str = "plain") -> None:  # type: ignore[no-untyped-def]
    """Item by item: the prompt the model sees (with few-shot examples), the gold answer, the choices."""
    assert [i.id for i in imported.items] == [i.id for i in original.items]
    assert [(f.prompts["plain"], f.targets["plain"]) for f in imported.fewshot] == [
        (f.prompts[style], f.targets[style]) for f in original.fewshot]
    for a, b in zip(original.items, imported.items):
        assert build_prompt(imported, b, imported.prompt_style) == build_prompt(original, a, style), a.id
        assert b.targets["plain"] == a.targets[style], a.id
        assert imported.choices_for(b) == original.choices_for(a), a.id


@pytest.mark.parametrize("style", ["plain", "chat"])
def test_default_evalset_round_trips_with_the_same_prompts_for_every_item(tmp_path: Path, style: str) -> None:
    written = export_evalset(DEFAULT, tmp_path / "lmeval", style=style)
    assert sorted(p.name for p in written) == ["selector_arithmetic.yaml", "selector_extraction.yaml",
                                               "selector_sentiment.yaml"]  # code_tests cannot be exported
    group = yaml.safe_load((tmp_path / "lmeval" / "selector_default.yaml").read_text())
    assert group == {"group": "selector_default", "task": [p.stem for p in written]}
    results = import_to_folder(written, tmp_path / "back")
    original = {t.name: t for t in load_evalset(DEFAULT)}
    back = {t.name: t for t in load_evalset(tmp_path / "back")}
    assert sorted(back) == ["selector_arithmetic", "selector_extraction", "selector_sentiment"]
    assert all(notes == [] for _, notes in results)  # nothing lost on the way
    for name, imported in back.items():
        task = original[name.removeprefix("selector_")]
        assert len(imported.items) == 48 and len(imported.fewshot) == len(task.fewshot) == 3
        _same_items(task, imported, style)
        assert (imported.metric, imported.metric_args) == (task.metric, task.metric_args)
        assert imported.type == task.type and imported.max_new_tokens == task.max_new_tokens
        assert imported.stop["plain"] == task.stop[style]
        assert imported.prompt_style == style and imported.system == (task.system if style == "chat" else None)


def test_export_writes_plain_jinja_and_lmevals_own_metrics_where_they_match(tmp_path: Path) -> None:
    [extraction, sentiment] = load_evalset(DEFAULT, tasks=["sentiment", "extraction"])  # sorted by name
    cfg = _load_yaml(export_task(sentiment, tmp_path))
    assert cfg["doc_to_text"] == sentiment.prompt["plain"] and cfg["doc_to_target"] == "{{ label }}"
    assert cfg["doc_to_choice"] == ["positive", "negative"] and cfg["output_type"] == "multiple_choice"
    assert cfg["metric_list"] == [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}]
    assert "process_results" not in cfg
    assert cfg["fewshot_config"] == {"sampler": "first_n"} and cfg["num_fewshot"] == 3
    assert isinstance(cfg["custom_dataset"], FunctionRef) and cfg["custom_dataset"] == "selector_sentiment_utils.load_jsonl"
    # extraction uses strip_punctuation and first_line: lm-eval's exact_match differs, so selector's scorer goes along
    cfg = _load_yaml(export_task(extraction, tmp_path))
    assert cfg["process_results"] == "selector_extraction_utils.process_results"
    assert cfg["generation_kwargs"] == {"until": ["\n"], "max_gen_toks": extraction.max_new_tokens,
                                        "do_sample": False, "temperature": 0.0}


def test_plain_exact_match_uses_lmevals_exact_match_with_whitespace_stripped(tmp_path: Path) -> None:
    path = _write(tmp_path / "ev", "city", "prompt: 'Where? {{ q }}'\ntarget: '{{ a }}'\nmetric_args: {ignore_case: true}\n",
                  [{"id": "1", "q": "x", "a": "Paris"}])
    cfg = _load_yaml(export_task(load_evalset(path.parent)[0], tmp_path / "out"))
    assert cfg["metric_list"] == [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True,
                                   "ignore_case": True, "ignore_punctuation": False,
                                   "regexes_to_ignore": [r"^\s+", r"\s+$"]}]
    assert "process_results" not in cfg
    assert (import_task(tmp_path / "out" / "selector_city.yaml").spec["metric_args"]
            == {"ignore_case": True, "strip": True})


def _utils_module(path: Path):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_exported_loader_keeps_dates_and_numbers_as_written(tmp_path: Path) -> None:
    # datasets' JSON reader (lm-eval's dataset_path: json) turns "2018-03-13" into a timestamp.
    rows = [{"id": "d1", "text": "Signed on 2018-03-13.", "date": "2018-03-13", "amount": "3.50", "code": "007"},
            {"id": "d2", "text": "Due 2019-01-01T10:00.", "date": "2019-01-01T10:00", "amount": "12", "code": "true"}]
    src = _write(tmp_path / "ev", "dates", "prompt: '{{ text }} When?'\ntarget: '{{ date }}'\nmetric: contains\n", rows)
    out = tmp_path / "out"
    cfg = _load_yaml(export_task(load_evalset(src.parent)[0], out))
    utils = _utils_module(out / "selector_dates_utils.py")
    dataset = utils.load_jsonl(**cfg["dataset_kwargs"], version=1.0)["test"]  # as lm-eval calls it
    assert {str(f.dtype) for f in dataset.features.values()} == {"string"}
    assert [dict(r) for r in dataset] == rows
    # process_results scores like selector's contains metric, target rendered from the row
    assert utils.process_results(dataset[0], ["It was 2018-03-13!"]) == {"contains": 1.0}
    assert utils.process_results(dataset[1], ["2019-01-01 10:00"]) == {"contains": 0.0}


def test_multiple_choice_with_digit_choices_exports_the_answer_as_an_index(tmp_path: Path) -> None:
    # lm-eval reads a doc_to_target that renders to digits as an index into the choices.
    rows = [{"id": "a", "q": "1+1?", "ans": "2"}, {"id": "b", "q": "0+1?", "ans": "1"}]
    src = _write(tmp_path / "ev", "digits", "type: multiple_choice\nprompt: '{{ q }}'\ntarget: '{{ ans }}'\n"
                 "choices: ['1', '2', '3']\n", rows)
    task = load_evalset(src.parent)[0]
    path = export_task(task, tmp_path / "out")
    cfg = _load_yaml(path)
    assert cfg["doc_to_target"] == "{{ _target_index }}"
    exported = [json.loads(line) for line in (tmp_path / "out" / "selector_digits.jsonl").read_text().splitlines()]
    assert [r["_target_index"] for r in exported] == ["1", "0"]
    back = import_task(path)
    assert [r["_target"] for r in back.rows] == ["2", "1"] and back.spec["target"] == "{{ _target }}"
    import_to_folder([path], tmp_path / "back")
    _same_items(task, load_evalset(tmp_path / "back")[0])


def test_a_template_equal_to_a_column_name_stays_text(tmp_path: Path) -> None:
    src = _write(tmp_path / "ev", "lit", "prompt: question\ntarget: '{{ a }}'\n", [{"id": "1", "question": "Q", "a": "A"}])
    cfg = _load_yaml(export_task(load_evalset(src.parent)[0], tmp_path / "out"))
    assert cfg["doc_to_text"] == '{{ "question" }}'  # lm-eval would read the bare word as the column


def test_code_tests_and_unknown_style_are_refused_with_the_task_file(tmp_path: Path) -> None:
    [code] = load_evalset(DEFAULT, tasks=["code"])
    with pytest.raises(EvalsetError, match="code_tests cannot be exported") as e:
        export_task(code, tmp_path)
    assert e.value.path.endswith("code.yaml") and e.value.field == "metric"
    with pytest.raises(EvalsetError, match="style"):
        export_task(code, tmp_path, style="markdown")


ARGS = st.fixed_dictionaries({"ignore_case": st.booleans(), "strip": st.booleans(),
                              "strip_punctuation": st.booleans(), "first_line": st.booleans()})
TEXT = st.text(st.sampled_from(list("aA1 .,-\n$5éÉ")), max_size=12)


@settings(max_examples=300, deadline=None)
@given(output=TEXT, target=TEXT.filter(str.strip), args=ARGS, metric=st.sampled_from(["exact_match", "contains"]))
def test_exported_scorer_agrees_with_selector_on_text_metrics(output: str, target: str, args: dict, metric: str) -> None:
    expected = get_metric(metric).score(ScoreInput(output=output, target=target, fields={}), args)
    assert score(metric, output, target, args) == expected


@settings(max_examples=300, deadline=None)
@given(output=st.text(st.sampled_from(list("0123456789.,-$ ab\u2212")), max_size=14),
       target=st.integers(-5000, 5000).map(str), which=st.sampled_from(["first", "last"]))
def test_exported_scorer_agrees_with_selector_on_numbers_and_f1(output: str, target: str, which: str) -> None:
    args = {"which": which, "abs_tol": 1e-6, "rel_tol": 0.0}
    numeric = get_metric("numeric").score(ScoreInput(output=output, target=target, fields={}), args)
    assert score("numeric", output, target, args) == numeric.value  # type: ignore[union-attr]
    f1 = get_metric("f1").score(ScoreInput(output=output, target=target, fields={}), {"ignore_case": True})
    assert score("f1", output, target, {"ignore_case": True}) == pytest.approx(f1)


def test_rows_with_different_fields_round_trip(tmp_path: Path) -> None:
    # The JSONL gets every column in every row (null where a row has none), so `datasets` keeps them all;
    # the import reads a null as "no such field in this row".
    rows = [{"id": "1", "q": "2+2?", "a": "4"}, {"id": "2", "q": "3+3?", "a": "6", "note": "from the 2019 set"}]
    src = _write(tmp_path / "ev", "sums", "prompt: '{{ q }}'\ntarget: '{{ a }}'\n", rows)
    task = load_evalset(src.parent)[0]
    path = export_task(task, tmp_path / "out")
    written = [json.loads(line) for line in (tmp_path / "out" / "selector_sums.jsonl").read_text().splitlines()]
    assert written[0] == {"a": "4", "id": "1", "note": None, "q": "2+2?"}
    back = import_task(path)
    assert back.rows == rows
    import_to_folder([path], tmp_path / "back")
    _same_items(task, load_evalset(tmp_path / "back")[0])
