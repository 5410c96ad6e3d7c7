"""A sweep records which kernel ran each variant: in the record, as MLflow params and in the report,
with the unpacked compressed-tensors variant marked and noted."""

from __future__ import annotations

import json
from pathlib import Path

from tests.sweep_helpers import QUICK, mlflow_runs, run_in_process


def test_a_sweep_records_and_shows_the_kernel(tiny_setup: dict[str, Path]) -> None:
    result = run_in_process(tiny_setup, "model=tiny", "precision=bf16,awq-int4", *QUICK,
                            "calibration.num_samples=4", "calibration.seq_len=64")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    parents, children = mlflow_runs(tiny_setup["out"])
    params = {c.data.params["precision"]: c.data.params for c in children}
    assert params["bf16"]["kernel"] == "dense" and params["bf16"]["kernel.unpacked"] == "False"
    awq = params["awq-int4"]
    assert (awq["kernel"], awq["kernel.unpacked"], awq["kernel.plain_layers"], awq["kernel.quantized_layers"]) == \
        ("dense", "True", "14", "0")
    sweep_dir = Path(parents[0].data.params["sweep_dir"])
    record = json.loads((sweep_dir / "tiny" / "awq-int4" / "record.json").read_text())
    assert record["kernel"]["linear_class"] == "torch.nn.modules.linear.Linear" and record["kernel"]["unpacked"]
    assert any("runs this checkpoint unpacked" in n for n in record["quant"]["notes"])
    report = (sweep_dir / "report" / "report.md").read_text()
    assert "| kernel | reasons |" in report and "dense (Linear) unpacked" in report
    assert "runs this checkpoint unpacked" in report  # among the caveats
