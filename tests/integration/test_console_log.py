"""`python -m selector ... > sweep.log`: a sweep whose stdout is a file (a log, CI, `| tee`) prints
its summary table with every column whole. rich assumed 80 columns there and cut the table to
"verd…" and "sent…"."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.sweep_helpers import QUICK, ROOT, selector_cmd


def test_summary_in_a_log_file_keeps_its_columns(tiny_setup: dict[str, Path]) -> None:
    log, errors = tiny_setup["base"] / "sweep.log", tiny_setup["base"] / "sweep.err"
    with log.open("w") as out, errors.open("w") as err:
        done = subprocess.run(selector_cmd(tiny_setup, "model=tiny", "precision=fp32,bf16", "tracker=none", *QUICK),
                              stdout=out, stderr=err, timeout=900, cwd=ROOT,
                              env={k: v for k, v in os.environ.items() if k != "COLUMNS"})
    assert done.returncode == 0, errors.read_text()[-3000:]
    text = log.read_text()
    assert "…" not in text  # rich's mark of a cut cell
    lines = text.splitlines()
    header = next(line for line in lines if "variant" in line and "verdict" in line)
    for column in ("sentiment", "arithmetic", "weight GB", "serving GB", "e2e p50 ms", "tok/s", "why not chosen"):
        assert column in header, header
    assert len(header) > 80  # wider than the 80 columns rich assumes off a terminal
    verdicts = ("winner", "eligible", "rejected", "stopped", "not needed", "failed", "skipped")
    for variant in ("tiny/fp32", "tiny/bf16"):
        row = next(line for line in lines if line.startswith(f"│ {variant} "))
        assert any(f" {word} " in row for word in verdicts), row
        assert row.count("[") >= 2  # both tasks' accuracies with their intervals
