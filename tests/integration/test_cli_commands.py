"""The sub-commands as a person runs them (`python -m selector compare`, `plan`, `list`, `select`,
`sync`, `evalset`): exit codes, one-line errors, files written; compare and plan as processes, the
others through the command line's entry in this process. What they compute is tested without a
process in tests/unit/test_compare.py and tests/unit/test_plan_grid.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from selector.records import RunRecord
from tests.sweep_helpers import cli_in_process
from tests.unit.test_compare import rec, side

pytestmark = pytest.mark.fast  # make test-fast: the sub-commands as processes

ROOT = Path(__file__).resolve().parents[2]


def _write_sweep(folder: Path, record: RunRecord) -> Path:
    record.save(folder / record.variant.model / record.variant.precision / "record.json")
    (folder / "sweep.json").write_text(json.dumps({"config": side("x", record).config, "started_at": 1.0}))
    return folder


def _compare(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "selector", "compare", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


def test_compare_command_errors_are_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    a = _write_sweep(tmp_path / "a", rec())
    b = _write_sweep(tmp_path / "b", rec("int8"))
    for args, needle in (((str(empty), str(a)), "not a sweep folder (no sweep.json and no record.json under it)"),
                         ((str(a), str(tmp_path / "nowhere")), "no such folder, and not an MLflow run id"),
                         ((str(a), str(b)), "no completed variant in common")):
        result = _compare(*args)
        assert result.returncode == 2, result.stderr
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: compare: ") and needle in lines[0], result.stderr


def test_compare_command_writes_its_table(tmp_path: Path) -> None:
    a = _write_sweep(tmp_path / "a", rec())
    b = _write_sweep(tmp_path / "b", rec(e2e=1400))
    result = _compare(str(a), str(b), "--out", str(tmp_path / "cmp"))
    assert result.returncode == 0, result.stderr
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| smol/bf16 | c=4 e2e p50 | 1,000 ms | 1,400 ms | +400 ms |" in md
    assert json.loads((tmp_path / "cmp" / "compare.json").read_text())["variants"] == ["smol/bf16"]


def test_plan_prints_a_table_through_the_cli() -> None:
    result = subprocess.run([sys.executable, "-m", "selector", "plan", "+sweep=qwen", "--gpu-mem", "24"],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    row = next(line for line in lines if line.startswith("qwen2.5-32b/fp16"))
    assert row.split()[-1] == "NO" and "conf/arch/qwen2.5-32b.json" in result.stdout
    bad = subprocess.run([sys.executable, "-m", "selector", "plan", "--batch", "0"], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert bad.returncode == 2 and "--batch" in bad.stderr and "Traceback" not in bad.stderr


def test_list_says_what_exists_and_what_runs_here() -> None:
    result = cli_in_process("list")
    assert result.returncode == 0, result.stderr
    assert "Precisions" in result.stdout and "gptq-int4" in result.stdout and "smollm2-135m" in result.stdout


def test_select_judges_a_stored_sweep_again_under_new_floors(tmp_path: Path) -> None:
    from selector.compose import compose
    from selector.config import to_dict

    record, sweep = rec(right=18), tmp_path / "sweep"  # 18 of 20 on "arith"
    record.save(sweep / record.variant.model / record.variant.precision / "record.json")
    # the sweep's own config, as a sweep keeps it: the default one
    (sweep / "sweep.json").write_text(json.dumps({"config": to_dict(compose([])), "started_at": 1.0}, default=str))
    passing = cli_in_process("select", "--from", str(sweep), "--out", str(tmp_path / "at-0.5"), "policy.floors.arith=0.5")
    failing = cli_in_process("select", "--from", str(sweep), "--out", str(tmp_path / "at-0.99"), "policy.floors.arith=0.99")
    for result in (passing, failing):
        assert result.returncode == 0, result.stderr
        assert "Report: " in result.stdout
    reports = {floor: json.loads((tmp_path / f"at-{floor}" / "report.json").read_text()) for floor in ("0.5", "0.99")}
    assert reports["0.5"]["selection"]["policy"]["floors"]["arith"] == 0.5
    assert reports["0.5"]["selection"]["winner"] == "smol/bf16" and reports["0.99"]["selection"]["winner"] is None
    missing = cli_in_process("select", "--from", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "no such file or folder" in missing.stderr and "Traceback" not in missing.stderr


def test_sync_copies_a_store_and_names_a_missing_one(tmp_path: Path) -> None:
    from mlflow import MlflowClient

    source, dest = f"sqlite:///{tmp_path / 'from.db'}", f"sqlite:///{tmp_path / 'to.db'}"
    client = MlflowClient(tracking_uri=source)
    run = client.create_run(client.create_experiment("selector"), tags={"selector.role": "sweep"})
    client.set_terminated(run.info.run_id)
    copied = cli_in_process("sync", "--from", source, "--to", dest)
    assert copied.returncode == 0, copied.stderr
    assert copied.stdout.startswith("copied 1 run(s) of selector"), copied.stdout
    again = cli_in_process("sync", "--from", source, "--to", dest)
    assert "copied 0 run(s)" in again.stdout and "1 already there" in again.stdout
    missing = cli_in_process("sync", "--from", f"sqlite:///{tmp_path / 'none.db'}", "--to", dest)
    assert missing.returncode == 2 and "no such database file" in missing.stderr


def test_evalset_exports_the_default_set_for_lm_eval(tmp_path: Path) -> None:
    result = cli_in_process("evalset", "export-lmeval", "selector/evalsets/default", "--out", str(tmp_path / "lmeval"))
    assert result.returncode == 0, result.stderr
    written = sorted(p.name for p in (tmp_path / "lmeval").rglob("*.yaml"))
    # a task per file and their group; code is left out (its tests run in selector's sandbox only)
    assert written == ["selector_arithmetic.yaml", "selector_default.yaml", "selector_extraction.yaml",
                       "selector_sentiment.yaml"], written
