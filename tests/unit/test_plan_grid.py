"""`python -m selector plan`: the grid as a sweep composes it, fit verdicts, and estimate vs measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from selector.config import SelectorConfig, to_dict
from selector.errors import UserError
from selector.commands.plan import compare_records, compose_grid, main
from selector.records import RunRecord
from tests.factories import perf, run_record



def test_qwen_sweep_grid_is_three_sizes_by_four_precisions() -> None:
    cfgs = compose_grid(["+sweep=qwen"])
    names = [f"{c.model.name}/{c.precision.name}" for c in cfgs]
    assert len(names) == 12
    assert {n.split("/")[0] for n in names} == {"qwen2.5-7b", "qwen2.5-14b", "qwen2.5-32b"}
    assert {n.split("/")[1] for n in names} == {"fp16", "int8", "awq-int4", "gptq-int4"}
    assert all(c.device == "cuda" and c.baseline_precision == "fp16" for c in cfgs)


def test_command_line_axes_replace_the_default_grid() -> None:
    cfgs = compose_grid(["model=smollm2-135m", "precision=bf16,int8"])
    assert [f"{c.model.name}/{c.precision.name}" for c in cfgs] == ["smollm2-135m/bf16", "smollm2-135m/int8"]


def test_unknown_model_is_a_config_error() -> None:
    with pytest.raises(UserError) as err:
        compose_grid(["model=nope"])
    assert "model=nope: there is no conf/model/nope.yaml" in str(err.value)


def test_plan_json_says_what_fits_a_24_gib_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["+sweep=qwen", "--gpu-mem", "24", "--batch", "1", "--context", "2048", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {v["variant"]: v for v in out["variants"]}
    assert out["device"] == "cuda" and out["batch"] == 1 and out["context"] == 2048
    assert rows["qwen2.5-7b/fp16"]["fits"] is True  # ~14.2 GiB of weights
    assert rows["qwen2.5-14b/awq-int4"]["fits"] is True
    assert rows["qwen2.5-32b/fp16"]["fits"] is False  # ~61 GiB of weights
    assert rows["qwen2.5-32b/gptq-int4"]["fits"] is True  # ~18 GiB + a small KV cache at batch 1
    for row in rows.values():
        assert row["total_bytes"] == row["weight_bytes"] + row["kv_bytes"] + row["activation_bytes"] + 2**30
    # fp16 7B: 7.62e9 parameters x 2 bytes
    assert rows["qwen2.5-7b/fp16"]["weight_bytes"] == 2 * rows["qwen2.5-7b/fp16"]["params"]
    # KV grows with the batch: at batch 8 the 32B 4-bit no longer fits 24 GiB
    assert main(["+sweep=qwen", "--gpu-mem", "24", "--batch", "8", "--json"]) == 0
    rows8 = {v["variant"]: v for v in json.loads(capsys.readouterr().out)["variants"]}
    assert rows8["qwen2.5-32b/gptq-int4"]["fits"] is False
    assert rows8["qwen2.5-32b/gptq-int4"]["kv_bytes"] == 8 * 4096 * 2 * 64 * 8 * 128 * 2


def _record(cfg: SelectorConfig, measured: int, device: str = "cpu") -> RunRecord:
    return run_record(cfg.model.name, cfg.precision.name, config=to_dict(cfg), weight_bytes=measured, perf=perf(device))


def test_compare_puts_the_estimate_next_to_the_measured_bytes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fp16, awq = compose_grid(["model=qwen2.5-7b", "precision=fp16,awq-int4"])
    estimate = 2 * 7_615_616_512  # the fp16 estimate: parameters x 2 bytes
    _record(fp16, measured=estimate // 2).save(tmp_path / "qwen2.5-7b" / "fp16" / "record.json")
    _record(awq, measured=5 * 2**30, device="cuda:0").save(tmp_path / "qwen2.5-7b" / "awq-int4" / "record.json")
    rows = {c.variant: c for c in compare_records(tmp_path)}
    assert rows["qwen2.5-7b/fp16"].estimated_bytes == estimate
    assert rows["qwen2.5-7b/fp16"].error_pct == pytest.approx(100.0)
    assert rows["qwen2.5-7b/awq-int4"].device == "cuda" and "packed" in rows["qwen2.5-7b/awq-int4"].layout
    assert main(["--compare", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "+100.00%" in out and "qwen2.5-7b/awq-int4" in out


def test_compare_of_an_empty_folder_says_so(tmp_path: Path) -> None:
    from selector.errors import UserError

    with pytest.raises(UserError, match="no completed RunRecords"):
        compare_records(tmp_path)
