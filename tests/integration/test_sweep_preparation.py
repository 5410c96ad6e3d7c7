"""What a sweep says about each variant's preparation (issue 50, point 3), on the tiny real model: a
quantization made in the sweep reads as its time, the same artifact found by a later sweep as the
time it took then "(cached)", and a sibling the adaptive search did not need as "not built" (before,
"cached" in the prepare-peak column, and the sweep's own quantization "(cached)" too: the worker
loads from the cache what its preparation process had just put there).

awq-int4 plans smallest and meets floors of 0, so it runs first; bf16, tiny's baseline, runs as
evidence; fp32 is not needed (tests/integration/test_search_adaptive.py, on the scripted engine)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.sweep_helpers import mlflow_runs, run_in_process

pytestmark = pytest.mark.quant("llmcompressor")
SWEEP = ("model=tiny", "measure=quick", "evalset.limit=2", "evalset.tasks=[sentiment,arithmetic]",
         "policy.floors.sentiment=0.0", "policy.floors.arithmetic=0.0", "measure.fidelity=false",
         "search.sibling_margin=null", "calibration.num_samples=4", "calibration.seq_len=64")


def _records(out: Path) -> dict[str, dict]:  # type: ignore[type-arg]
    [sweep] = sorted((out / "sweeps").iterdir(), key=lambda p: p.stat().st_mtime)[-1:]
    return {f"{p.parent.parent.name}/{p.parent.name}": json.loads(p.read_text()) for p in sweep.rglob("record.json")}


def _row(report: str, variant: str, columns: tuple[str, ...]) -> tuple[str, ...]:
    """The cells of `variant`'s row of the All variants table under these columns."""
    table = report.split("## All variants", 1)[1]
    header = next(line for line in table.splitlines() if line.startswith("| variant |"))
    names = [c.strip() for c in header.strip("|").split("|")]
    row = next(line for line in table.splitlines() if line.startswith(f"| {variant} |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    return tuple(cells[names.index(c)] for c in columns)


def test_built_cached_and_not_built_in_the_report(tiny_setup: dict[str, Path]) -> None:
    result = run_in_process(tiny_setup, *SWEEP, "precision=fp32,bf16,awq-int4")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    records = _records(tiny_setup["out"])
    assert {n: r["status"] for n, r in records.items()} == {
        "tiny/awq-int4": "completed", "tiny/bf16": "completed", "tiny/fp32": "not_needed"}
    awq, fp32 = records["tiny/awq-int4"], records["tiny/fp32"]
    assert awq["preparation"] == "built" and any(line.endswith(" (quantized)") for line in awq["config"]["prepared"])
    assert awq["quant"]["cached"] is False and awq["quant"]["quantize_s"] > 0
    assert awq["timings_s"]["quantize"] == awq["quant"]["quantize_s"]  # a stage of this sweep
    assert not any(n.startswith("reused cached artifact") for n in awq["quant"]["notes"])
    assert fp32["preparation"] == "none" and fp32["quant"] is None and fp32["memory"] is None
    assert records["tiny/bf16"]["preparation"] in ("built", "cache")  # converted to bf16 here, or found so

    [report] = (tiny_setup["out"] / "sweeps").glob("*/report/report.md")
    text = report.read_text()
    columns = ("prepare peak GB", "quantize time")
    print({v: _row(text, v, columns) for v in records})
    prepare_peak, quantize = _row(text, "tiny/awq-int4", columns)
    assert re.fullmatch(r"[0-9.]+", prepare_peak) and "cached" not in quantize and quantize.endswith(" s")
    assert _row(text, "tiny/fp32", columns) == ("not built", "not built")
    assert "quantized in " in result.stdout + result.stderr  # the console's line for the variant
    _, children = mlflow_runs(tiny_setup["out"])
    params = {c.data.params["precision"]: c.data.params for c in children}
    assert (params["awq-int4"]["preparation"], params["awq-int4"]["quant.cached"]) == ("built", "False")

    # The same variant in a fresh output folder with the same cache: the artifact is read from it,
    # its time the one it took in the first sweep, marked.
    again = run_in_process({**tiny_setup, "out": tiny_setup["base"] / "again"}, *SWEEP, "precision=awq-int4")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-5000:]
    second = _records(tiny_setup["base"] / "again")["tiny/awq-int4"]
    assert second["preparation"] == "cache" and second["quant"]["cached"] is True
    assert second["quant"]["quantize_s"] == awq["quant"]["quantize_s"] and "quantize" not in second["timings_s"]
    [report] = (tiny_setup["base"] / "again" / "sweeps").glob("*/report/report.md")
    assert _row(report.read_text(), "tiny/awq-int4", columns) == ("cached", f"{quantize} (cached)")
