"""selector.evaluate: one variant composed from names and overrides and measured in this process by
the function a sweep's worker runs (selector.variant.run.run_here), without the Hydra app. Its
variant answers through engine=scripted over the tiny model's folder (nothing is loaded)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import selector
from selector.errors import UserError
from selector.records import RunRecord

pytestmark = pytest.mark.fast  # make test-fast: one variant, scripted

TASKS = ["sentiment", "arithmetic"]


def _overrides(model_dir: Path, out: Path, accuracy: float) -> dict[str, object]:
    return {"model.path": str(model_dir), "evalset": {"limit": 3, "tasks": TASKS}, "search": "grid",
            "output_dir": str(out), "engine.default_accuracy": accuracy}


def test_evaluate_returns_the_variants_record(tmp_path: Path, tiny_model_dir: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from selector.variant import keys
    from selector.variant.evaluation import load_tasks

    computed: list[str] = []
    real = keys.evaluation_key
    monkeypatch.setattr(keys, "evaluation_key", lambda *a: computed.append(real(*a)) or computed[-1])
    job_dir = tmp_path / "job"
    record = selector.evaluate(_overrides(tiny_model_dir, tmp_path / "out", 1.0), model="path", precision="fp32",
                               engine="scripted", measure="quick", job_dir=job_dir)
    assert isinstance(record, RunRecord)
    assert record.status == "completed" and record.reason == ""
    assert record.name == f"{tiny_model_dir.name}/fp32" and record.variant.precision == "fp32"
    assert sorted(record.tasks) == sorted(TASKS)
    assert all(r.value == 1.0 and r.n == 3 for r in record.tasks.values())  # every answer right, as scripted
    assert record.perf is not None and record.perf.latency is not None
    assert record.config["engine"]["kind"] == "scripted" and record.config["evalset"]["limit"] == 3
    # the keys a sweep's preflight would give it, computed once and handed over in job.json
    from selector.compose import config_from_dict

    assert computed == [record.config["evaluation_key"]]  # once, handed to the run (not again in the pipeline)
    cfg = config_from_dict(record.config)
    monkeypatch.undo()
    expected = keys.keys_of(cfg, load_tasks(cfg)[1])
    job = json.loads((job_dir / "job.json").read_text())
    assert (record.key, record.config["evaluation_key"]) == (expected.variant, expected.evaluation)
    assert (job["key"], job["evaluation_key"]) == (expected.variant, expected.evaluation)
    assert RunRecord.load(job_dir / "record.json") == record
    assert (tmp_path / "out" / "evaluations" / expected.evaluation / "sentiment.jsonl").is_file()

    wrong = selector.evaluate(_overrides(tiny_model_dir, tmp_path / "out", 0.0), model="path", precision="fp32",
                              engine="scripted", measure="quick", job_dir=tmp_path / "again")
    assert wrong.config["evaluation_key"] != expected.evaluation  # another engine setting: its own items
    assert all(r.value == 0.0 for r in wrong.tasks.values())


def test_evaluate_refuses_a_sweep(tmp_path: Path, tiny_model_dir: Path) -> None:
    with pytest.raises(UserError, match="one value per key"):
        selector.evaluate(["model=path", f"model.path={tiny_model_dir}", "precision=fp32,bf16", "engine=scripted"])
