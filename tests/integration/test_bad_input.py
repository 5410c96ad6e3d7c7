"""Bad input stops the run before any model loads: exit code 2, one paragraph naming the file, line
and field, no traceback, and nothing written to MLflow. Each runs the command line's own entry in
this process (tests/sweep_helpers.py run_in_process); test_sweep_tiny.py runs one as a process."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from selector.paths import DEFAULT_EVALSET
from tests.sweep_helpers import run_in_process

pytestmark = pytest.mark.fast  # make test-fast: the command line's bad-input paths, in seconds


def assert_usage_error(result, *needles: str) -> None:  # type: ignore[no-untyped-def]
    assert result.returncode == 2, (result.stdout[-2000:], result.stderr[-3000:])
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr[-3000:]


def copy_default_evalset(dest: Path) -> Path:
    shutil.copytree(DEFAULT_EVALSET, dest)
    return dest


def test_malformed_eval_row_names_file_and_line(tiny_setup: dict[str, Path]) -> None:
    evalset = copy_default_evalset(tiny_setup["base"] / "evalset")
    rows = (evalset / "arithmetic.jsonl").read_text().splitlines()
    rows[4] = rows[4][:-5]  # a truncated JSON object on line 5
    (evalset / "arithmetic.jsonl").write_text("\n".join(rows) + "\n")
    result = run_in_process(tiny_setup, "model=tiny", "precision=fp32", f"evalset.path={evalset}")
    assert_usage_error(result, "arithmetic.jsonl:5")
    assert not (tiny_setup["out"] / "mlflow.db").exists()


def test_task_yaml_missing_a_field(tiny_setup: dict[str, Path]) -> None:
    evalset = copy_default_evalset(tiny_setup["base"] / "evalset")
    text = (evalset / "sentiment.yaml").read_text().replace("data: sentiment.jsonl\n", "")
    (evalset / "sentiment.yaml").write_text(text)
    result = run_in_process(tiny_setup, "model=tiny", "precision=fp32", f"evalset.path={evalset}")
    assert_usage_error(result, "sentiment.yaml", "data")
    assert not (tiny_setup["out"] / "mlflow.db").exists()


def test_row_missing_a_template_field(tiny_setup: dict[str, Path]) -> None:
    evalset = copy_default_evalset(tiny_setup["base"] / "evalset")
    lines = (evalset / "extraction.jsonl").read_text().splitlines()
    lines[2] = lines[2].replace('"text"', '"txt"')
    (evalset / "extraction.jsonl").write_text("\n".join(lines) + "\n")
    result = run_in_process(tiny_setup, "model=tiny", "precision=fp32", f"evalset.path={evalset}")
    assert_usage_error(result, "extraction.jsonl:3", "text")


@pytest.mark.parametrize(
    "override, needles",
    [
        ("precision=bf61", ("precision=bf61", "Did you mean bf16")),
        ("model=smolm2-135m", ("model=smolm2-135m", "smollm2-135m")),
        ("engine.batch_size=eight", ("command line", "'eight'", "engine.batch_size", "Integer")),
        ("+model.colour=blue", ("model.colour",)),
        ("model.colour=blue", ("model.colour",)),
        ("policy.rule=strictest", ("command line", "policy.rule", "lower_bound")),
        ("policy.floors.code=70", ("policy.floors.code", "fractions")),
        ("search.alpha=0.6", ("command line", "search.alpha", "between 0 and 0.5")),
        ("policy.confidence=0.5", ("command line", "policy.confidence", "(0, 0.5)")),
        ("policy.default_margin=-0.02", ("command line", "policy.default_margin", "allowed drop")),
        ("policy.rule=non_inferiority", ("command line", "policy.rule", "only variant", "rule=point")),
    ],
)
def test_bad_config_is_a_usage_error(tmp_path: Path, override: str, needles: tuple[str, ...]) -> None:
    setup = {"conf": tmp_path / "conf", "out": tmp_path / "out", "cache": tmp_path / "cache"}
    (tmp_path / "conf").mkdir()
    result = run_in_process(setup, override, "model=smollm2-135m", "precision=bf16") \
        if not override.startswith(("model=", "precision=")) else run_in_process(setup, override)
    assert_usage_error(result, *needles)
    assert not (tmp_path / "out" / "mlflow.db").exists()


def test_truncated_weights_are_rejected_before_loading(tiny_setup: dict[str, Path], tiny_model_dir: Path) -> None:
    broken = tiny_setup["base"] / "broken-model"
    shutil.copytree(tiny_model_dir, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    from tests.tiny import write_model_config

    write_model_config(tiny_setup["conf"], "broken", broken)
    result = run_in_process(tiny_setup, "model=broken", "precision=fp32")
    assert_usage_error(result, "model.safetensors")
    assert not (tiny_setup["out"] / "mlflow.db").exists()


def test_bad_value_in_a_users_config_file_names_file_and_line(tiny_setup: dict[str, Path]) -> None:
    path = tiny_setup["conf"] / "model" / "tiny.yaml"
    path.write_text(path.read_text().replace("params_b: 0.0001", "params_b: a lot"))
    result = run_in_process(tiny_setup, "model=tiny", "precision=fp32")
    assert_usage_error(result, "tiny.yaml:3", "model.params_b", "Float")
