"""SmolLM2-135M (a real pretrained model from the offline ladder) on a slice of the default eval set,
through bf16 and bitsandbytes int8: the sweep the README's quick start runs, made small."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.sweep_helpers import mlflow_runs, run_in_process

pytestmark = [pytest.mark.slow, pytest.mark.quant("bitsandbytes")]


def test_smollm2_bf16_and_int8(tmp_path: Path, shared_model_cache: Path) -> None:
    setup = {"conf": tmp_path / "conf", "out": tmp_path / "out", "cache": shared_model_cache}
    (tmp_path / "conf").mkdir()
    result = run_in_process(setup, "model=smollm2-135m", "precision=bf16,int8", "measure=quick", "search=grid",
                            "evalset.limit=8", "evalset.tasks=[sentiment,extraction,arithmetic]")
    assert result.returncode == 0, result.stderr[-4000:]
    parents, children = mlflow_runs(setup["out"])
    runs = {c.info.run_name: c.data for c in children}
    assert set(runs) == {"smollm2-135m/bf16", "smollm2-135m/int8"}
    bf16, int8 = runs["smollm2-135m/bf16"], runs["smollm2-135m/int8"]
    # A real model, not noise: SmolLM2 reads sentiment well (0.92 on the whole task). On 8 items a
    # machine's rounding can flip one or two answers, so the bar is 5 of 8 (P(<= 4 of 8) = 0.2% at
    # 0.92), not a margin between the two variants; int8's closeness is judged on its fidelity below.
    assert bf16.metrics["accuracy/sentiment"] >= 5 / 8
    # int8 keeps about half of bf16's weight bytes (embeddings and norms stay 16-bit).
    assert 0.45 < int8.metrics["memory/weight_gb"] / bf16.metrics["memory/weight_gb"] < 0.75
    assert int8.params["backend"] == "bnb" and bf16.params["dtype"] == "bfloat16"
    assert int8.metrics["fidelity/top1_agreement"] >= 0.8
    report = json.loads((Path(parents[0].data.params["sweep_dir"]) / "report" / "report.json").read_text())
    assert report["selection"]["summary"]
    assert "dequantized GGUF" in (Path(parents[0].data.params["sweep_dir"]) / "report" / "report.md").read_text()
