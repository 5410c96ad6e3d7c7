"""Run the atheris fuzzer of the eval-set loader for a bounded number of inputs (it needs its own
process: libFuzzer owns the main loop and exits the process when it finds a crash)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # fuzzing: outside the inner loop (the full suite runs it)

HARNESS = Path(__file__).resolve().parents[1] / "fuzz" / "fuzz_evalset.py"


def test_atheris_finds_no_crash_in_the_loader(tmp_path: Path) -> None:
    pytest.importorskip("atheris")
    seeds = tmp_path / "corpus"
    seeds.mkdir()
    (seeds / "ok").write_bytes(b'\x00{"id": "1", "q": "2+2", "a": "4"}\n{"id": "2", "q": "{{ a }}", "a": "x"}\n')
    result = subprocess.run(
        [sys.executable, str(HARNESS), "-runs=1500", "-max_total_time=40", "-rss_limit_mb=8192", f"-artifact_prefix={tmp_path}/",
         str(seeds)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "Done" in result.stderr or "DONE" in result.stderr
