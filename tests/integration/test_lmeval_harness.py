"""The exported tasks, run by lm-evaluation-harness itself on the tiny model: lm-eval builds exactly
selector's prompts, reads the data as written (dates stay strings) and scores as selector does; and
a task written for lm-eval, imported, gives selector the prompts lm-eval built.

lm-eval pins libraries of its own, so it lives in a separate virtual environment named by
$SELECTOR_LMEVAL_VENV (this test skips without it). Create one (see docs/lm-eval.md):

    python3.11 -m venv ../lmeval-venv
    printf 'torch==2.13.0\\ntransformers==5.17.0\\n' > lmeval-constraints.txt
    ../lmeval-venv/bin/pip install -c lmeval-constraints.txt "lm-eval[hf]==0.4.13"
    export SELECTOR_LMEVAL_VENV=$(cd ../lmeval-venv && pwd)
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from selector.tasks import get_metric, load_evalset
from selector.tasks.lmeval import export_evalset, export_task, import_to_folder
from selector.tasks.metrics import ScoreInput
from selector.tasks.prompts import build_prompt
from selector.paths import DEFAULT_EVALSET

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
VENV = os.environ.get("SELECTOR_LMEVAL_VENV", "")
LM_EVAL = Path(VENV) / "bin" / "lm_eval"
DATES = [{"id": "d1", "text": "The lease was signed on 2018-03-13 in Oslo.", "when": "2018-03-13"},
         {"id": "d2", "text": "Payment is due 2019-01-01 at noon.", "when": "2019-01-01"},
         {"id": "d3", "text": "We met on 2020-07-04.", "when": "2020-07-04"}]


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _samples(out: Path) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for path in out.rglob("samples_*.jsonl"):
        task = path.name.removeprefix("samples_").rsplit("_", 1)[0]
        found[task] = [json.loads(line) for line in path.read_text().splitlines()]
    return found


@pytest.mark.skipif(not LM_EVAL.is_file(), reason="no lm-eval environment: set SELECTOR_LMEVAL_VENV (docs/lm-eval.md)")
def test_lmeval_runs_exported_and_imported_tasks_like_selector(tmp_path: Path, tiny_model_dir: Path) -> None:
    export = tmp_path / "lmeval-tasks"
    export_evalset(DEFAULT_EVALSET, export, tasks=["sentiment", "arithmetic", "extraction"])
    dates = tmp_path / "dates"
    _jsonl(dates / "dates.jsonl", DATES[1:])
    _jsonl(dates / "dates_fewshot.jsonl", DATES[:1])
    (dates / "dates.yaml").write_text("data: dates.jsonl\nfewshot: {n: 1, data: dates_fewshot.jsonl}\n"
                                      "prompt: 'Text: {{ text }}\\nDate:'\ntarget: '{{ when }}'\nstop: ['\\n']\n"
                                      "max_new_tokens: 6\n")
    export_task(load_evalset(dates)[0], export)
    # A task as a user writes it for lm-eval: integer labels (an index into the choices), a json file.
    user = tmp_path / "user"
    _jsonl(user / "reviews.jsonl", [{"text": "Great soup.", "label": 0}, {"text": "Cold and late.", "label": 1}])
    _jsonl(user / "shots.jsonl", [{"text": "Loved it.", "label": 0}])
    (export / "user_reviews.yaml").write_text(
        "task: user_reviews\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {user / 'reviews.jsonl'}\n    train: {user / 'shots.jsonl'}\n"
        "test_split: test\nfewshot_split: train\nnum_fewshot: 1\nfewshot_config: {sampler: first_n}\n"
        "output_type: multiple_choice\ndoc_to_text: 'Review: {{text}}\\nSentiment:'\ndoc_to_target: label\n"
        "doc_to_choice: [positive, negative]\nmetric_list: [{metric: acc}]\n")

    results = tmp_path / "results"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    run = subprocess.run(
        [str(LM_EVAL), "--model", "hf", "--model_args", f"pretrained={tiny_model_dir},dtype=float32", "--device", "cpu",
         "--include_path", str(export), "--tasks", "selector_default,selector_dates,user_reviews", "--limit", "2",
         "--log_samples", "--output_path", str(results)],
        cwd=tmp_path, env={**env, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
        capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    samples = _samples(results)
    assert sorted(samples) == ["selector_arithmetic", "selector_dates", "selector_extraction", "selector_sentiment",
                               "user_reviews"]

    tasks = {t.name: t for t in load_evalset(DEFAULT_EVALSET)} | {"dates": load_evalset(dates)[0]}
    for name, rows in samples.items():
        if name == "user_reviews":
            continue
        task = tasks[name.removeprefix("selector_")]
        assert len(rows) == 2
        for row in rows:
            item = next(i for i in task.items if i.id == row["doc"]["id"])
            assert row["doc"] == {**item.fields, **({task.choices_field: item.choices} if task.choices_field else {})}
            assert row["arguments"]["gen_args_0"]["arg_0"] == build_prompt(task, item, "plain")
            assert row["target"] == item.targets["plain"]
            if task.type == "generate":  # lm-eval's score of its output is selector's score of that output
                output = row["resps"][0][0]
                mine = get_metric(task.metric).score(ScoreInput(output=output, target=item.targets["plain"],
                                                                fields=item.fields), task.metric_args)
                assert row[task.metric] == float(getattr(mine, "value", mine))
    assert [r["doc"]["when"] for r in samples["selector_dates"]] == ["2019-01-01", "2020-07-04"]  # not timestamps

    # The lm-eval task, imported: selector's prompts and answers are the ones lm-eval used.
    [(written, _)] = import_to_folder([export / "user_reviews.yaml"], tmp_path / "imported")
    imported = load_evalset(written.parent)[0]
    for row, item in zip(sorted(samples["user_reviews"], key=lambda r: r["doc_id"]), imported.items):
        assert row["arguments"]["gen_args_0"]["arg_0"] == build_prompt(imported, item, "plain")
        assert ["positive", "negative"][int(row["target"])] == item.targets["plain"]  # lm-eval logs the index
