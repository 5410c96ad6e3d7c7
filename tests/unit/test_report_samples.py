"""The report's example outputs: which items are picked, how they are bounded, read and escaped."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from selector.report import write_report
from selector.report.samples import (
    OUTPUT_CHARS, PER_TASK, PROMPT_CHARS, examples, load_samples, read_samples, subject_variant, task_examples,
)
from tests.fixtures.sample_report import sample_outputs, sample_sweep
from selector.records import RunRecord, SampleRecord
from selector.verdicts import Selection, Verdict
from tests.factories import run_record, task_result

XSS = "<script>window.__xss = 1</script>"


def _s(item: str, score: float, output: str = "", task: str = "qa", prompt: str = "Q?") -> SampleRecord:
    return SampleRecord(task=task, id=item, prompt=prompt, output=output or f"out-{item}", target=f"gold-{item}",
                        score=score)


def test_flips_come_first_then_wrong_answers_and_the_list_is_bounded() -> None:
    # reference right on 0-5, wrong on 6-9; subject wrong on 1, 3, 7, 8, 9 and right on 6.
    ref = [_s(f"i{i}", 1.0 if i < 6 else 0.0) for i in range(10)]
    mine = [_s(f"i{i}", 0.0 if i in (1, 3, 7, 8, 9) else 1.0) for i in range(10)]
    found = task_examples("qa", "small/int8", "big/bf16", mine, ref, per_task=4)
    assert (found.flips_to_wrong, found.flips_to_right, found.wrong, found.n) == (2, 1, 5, 10)
    assert [(e.id, e.kind) for e in found.examples] == [
        ("i1", "right → wrong"), ("i3", "right → wrong"), ("i6", "wrong → right"), ("i7", "wrong")]
    flip = found.examples[0]
    assert flip.reference_output == "out-i1" and flip.reference_score == 1.0 and flip.score == 0.0
    assert len(task_examples("qa", "s", "r", mine, ref).examples) == min(PER_TASK, 6)


def test_graded_scores_use_the_selections_right_threshold() -> None:
    ref = [_s("a", 0.6), _s("b", 0.4)]
    mine = [_s("a", 0.4), _s("b", 0.6)]  # 0.5 is "right", as in the paired McNemar counts
    found = task_examples("qa", "s", "r", mine, ref)
    assert [(e.id, e.kind) for e in found.examples] == [("a", "right → wrong"), ("b", "wrong → right")]


def test_winner_equal_to_reference_shows_only_its_wrong_answers() -> None:
    mine = [_s("a", 1.0), _s("b", 0.0)]
    found = task_examples("qa", "big/bf16", "big/bf16", mine, mine)
    assert found.reference is None and [(e.id, e.kind, e.reference_output) for e in found.examples] == [
        ("b", "wrong", None)]


def test_long_text_is_clipped_keeping_the_prompts_end() -> None:
    prompt = "few-shot " * 200 + "THE ITEM?"
    long_output = "x" * 5000
    found = task_examples("qa", "s", None, [_s("a", 0.0, output=long_output, prompt=prompt)], [])
    e = found.examples[0]
    assert e.prompt.startswith("…") and e.prompt.endswith("THE ITEM?") and len(e.prompt) == PROMPT_CHARS
    assert e.output.endswith("…") and len(e.output) == OUTPUT_CHARS


def _record(name: str) -> RunRecord:
    model, precision = name.split("/")
    return run_record(model, precision, [task_result("qa", value=0.5, n=2, ci=(0.1, 0.9), metric="exact_match")])


def test_subject_is_the_winner_else_the_best_placed_other_variant() -> None:
    records = [_record("big/bf16"), _record("small/int8"), _record("small/bf16")]
    samples = {r.name: [_s("a", 0.0)] for r in records}
    verdicts = [Verdict(variant="small/bf16", status="rejected"), Verdict(variant="small/int8", status="rejected"),
                Verdict(variant="big/bf16", status="rejected")]
    no_winner = Selection(policy={}, winner=None, reference="big/bf16", summary="", verdicts=verdicts)
    assert subject_variant(records, no_winner, samples) == "small/bf16"
    won = no_winner.model_copy(update={"winner": "small/int8"})
    assert subject_variant(records, won, samples) == "small/int8"
    assert examples(records, won, None) == [] and examples(records, won, {}) == []


def _job(sweep: Path, name: str, samples: list[SampleRecord], lines: list[str] = ()) -> Path:  # type: ignore[assignment]
    folder = sweep / name
    _record(name).save(folder / "record.json")
    (folder / "samples.jsonl").write_text("\n".join([s.model_dump_json() for s in samples] + list(lines)) + "\n")
    return folder


def test_load_samples_reads_each_job_folder_and_skips_damaged_lines(tmp_path: Path) -> None:
    _job(tmp_path, "tiny/fp32", [_s("a", 1.0), _s("b", 0.0)], ["{not json", '{"task": "qa"}'])
    _job(tmp_path, "tiny/bf16", [_s("a", 0.0)])
    (tmp_path / "tiny" / "int8").mkdir()
    _record("tiny/int8").save(tmp_path / "tiny" / "int8" / "record.json")  # no samples (skipped variant)
    found = load_samples(tmp_path)
    assert sorted(found) == ["tiny/bf16", "tiny/fp32"]
    assert [(s.id, s.score) for s in found["tiny/fp32"]] == [("a", 1.0), ("b", 0.0)]


def test_load_samples_keeps_the_newest_record_of_a_variant(tmp_path: Path) -> None:
    old = _job(tmp_path / "run1", "tiny/fp32", [_s("old", 0.0)])
    _job(tmp_path / "run2", "tiny/fp32", [_s("new", 0.0)])
    past = time.time() - 3600
    os.utime(old / "record.json", (past, past))
    assert [s.id for s in load_samples(tmp_path)["tiny/fp32"]] == ["new"]


def test_read_samples_round_trips_what_the_runner_writes(tmp_path: Path) -> None:
    path = tmp_path / "samples.jsonl"
    written = [_s("a", 1.0, output=XSS), _s("b", 0.0, output="line 1\nline 2")]
    path.write_text("".join(json.dumps(s.model_dump()) + "\n" for s in written))
    assert read_samples(path) == written


def test_report_shows_examples_escaped_in_html_and_fenced_in_markdown(tmp_path: Path) -> None:
    records, selection, context = sample_sweep()
    samples = sample_outputs(records, inject=XSS + " ``` | *bold*")
    paths = write_report(records, selection, context, tmp_path, samples=samples)
    html, md = paths["html"].read_text(), paths["md"].read_text()
    assert 'id="examples"' in html and 'href="#examples"' in html
    assert "<script" not in html  # the page has no script element at all
    assert "&lt;script&gt;window.__xss = 1&lt;/script&gt;" in html
    shown = examples(records, selection, samples)
    by_name = {r.name: r for r in records}
    winner, reference = by_name[selection.winner], by_name[selection.reference]  # type: ignore[index]
    differs = {t for t, result in winner.tasks.items()  # a wrong answer or a flip vs the reference
               if any(v < 1 or v != reference.tasks[t].item_scores[i] for i, v in result.item_scores.items())}
    assert differs and {t.task for t in shown} == differs
    assert all(t.subject == selection.winner and 0 < len(t.examples) <= PER_TASK for t in shown)
    for t in shown:  # every example row is in the page, with its item id
        assert all(f">{e.id}<" in html for e in t.examples)
    section = md.split("## Example outputs", 1)[1].split("\n## ", 1)[0]
    # In Markdown the output sits in a fence longer than any backtick run inside it: never markup.
    assert f"````text\nwrong answer{XSS} ``` | *bold*\n````" in section
    assert section.count("#### ") == sum(len(t.examples) for t in shown)


def test_report_without_samples_has_no_examples_section(tmp_path: Path) -> None:
    paths = write_report(*sample_sweep(), out_dir=tmp_path)
    assert 'id="examples"' not in paths["html"].read_text()
    assert "## Example outputs" not in paths["md"].read_text()
