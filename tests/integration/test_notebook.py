"""notebooks/compare_variants.ipynb, executed with nbclient on this venv's kernel against a small
store: RunRecords logged by the real MLflow tracker (or written to a sweep folder), no model run.
The notebook must run without an error and show the variants, both recommendations and the plots."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from selector.compose import compose
from selector.config import PolicyConfig, TrackerConfig, to_dict
from tests.fixtures.sample_report import FLOORS, sample_sweep
from selector.selection import select
from selector.trackers.mlflow import MlflowTracker

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "compare_variants.ipynb"
TRY_FLOORS = {"arithmetic": 0.10}


def _mlflow_store(folder: Path, records: list, config: dict | None = None) -> str:  # type: ignore[type-arg]
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    tracker = MlflowTracker(TrackerConfig(tracking_uri=uri), "notebook-test", folder)
    parent = tracker.start_sweep("sweep-key", "sample sweep", {}, {}, config=config)
    for record in records:
        child = tracker.start_variant(parent, record.name, record.key, {})
        tracker.finish_variant(child, record.model_copy(deep=True), [])
    tracker.finish_sweep(parent, {}, {}, [])
    return uri


def _sweep_folder(folder: Path, records: list, config: dict | None = None) -> Path:  # type: ignore[type-arg]
    for record in records:
        record.save(folder / record.variant.model / record.variant.precision / "record.json")
    if config is not None:
        (folder / "sweep.json").write_text(json.dumps({"config": config}))
    return folder


def _reused(records: list) -> dict:  # type: ignore[type-arg]
    """Records reused from an earlier, stricter sweep (their own configs hold its floors) and the
    config of the sweep that reused them, whose floors are FLOORS: the notebook must judge by those."""
    for record in records:
        record.config["policy"] = {"floors": {task: 0.99 for task in FLOORS}}
    config = to_dict(compose([]))
    config["policy"]["floors"] = dict(FLOORS)
    return config


def _run(parameters: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> nbformat.NotebookNode:
    # The kernel starts in notebooks/: it must import the selector under test (this checkout), not
    # whichever copy the environment has installed.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    [cell] = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert nb.cells.index(cell) <= 1  # the first code cell: what a person edits
    cell.source = parameters
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    nbformat.write(nb, tmp_path / "executed.ipynb")  # kept for a look when the test fails
    return nb


def _outputs(nb: nbformat.NotebookNode) -> tuple[list[dict], str, int]:
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    text = []
    for o in outputs:
        text.append(o.get("text", ""))
        data = o.get("data", {})
        text += [data.get("text/plain", ""), data.get("text/markdown", ""), data.get("text/html", "")]
    svgs = sum("image/svg+xml" in o.get("data", {}) for o in outputs)
    return outputs, "\n".join(text), svgs


@pytest.mark.parametrize("source", ["mlflow", "folder", "reused-mlflow", "reused-folder"])
def test_notebook_runs_on_a_small_store_and_shows_the_verdict_change(tmp_path: Path, source: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    records, _, _ = sample_sweep()
    policy = PolicyConfig(floors=dict(FLOORS))
    before = select(records, policy).winner
    after = select(records, dataclasses.replace(policy, floors={**FLOORS, **TRY_FLOORS})).winner
    assert before and after and before != after  # the data makes the what-if visible
    config = _reused(records) if source.startswith("reused") else None
    assert select(records, PolicyConfig(**records[0].config.get("policy", {}))).winner != before or config is None

    if source.endswith("mlflow"):
        where = (f"TRACKING_URI = {_mlflow_store(tmp_path, records, config)!r}\nEXPERIMENT = 'notebook-test'\n"
                 "SWEEP_DIR = None\n")
    else:
        where = f"SWEEP_DIR = {str(_sweep_folder(tmp_path / 'sweep', records, config))!r}\n"
    floors = "None" if config else json.dumps(FLOORS)  # reused: the sweep's own recorded floors
    nb = _run(f"{where}PARENT_RUN_ID = None\nFLOORS = {floors}\nTRY_FLOORS = {json.dumps(TRY_FLOORS)}\n",
              tmp_path, monkeypatch)

    outputs, text, svgs = _outputs(nb)
    errors = [o for o in outputs
              if o.get("output_type") == "error" or (o.get("name") == "stderr" and "Error" in o.get("text", ""))]
    assert errors == []
    assert f"{len(records)} variants from" in text
    for record in records:
        assert record.name in text, record.name
    assert f"**Winner: {before}**" in text and f"**Winner: {after}**" in text
    assert f"winner: {before} -> {after}" in text
    assert svgs == 3  # accuracy per task, vs memory, vs latency: the report's own figures
