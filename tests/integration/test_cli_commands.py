"""The sub-commands as a person runs them (`python -m selector compare`, `plan`): exit codes, one-line
errors, files written. What they compute is tested without a process in tests/unit/test_compare.py
and tests/unit/test_plan_grid.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from selector.records import RunRecord
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
