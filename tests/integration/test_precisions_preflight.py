"""A bad precision param stops the sweep in its preflight: exit code 2, one line naming the file (or
the command line), the line and the field, and nothing loaded or written to MLflow (the command
line's entry run in this process: tests/sweep_helpers.py run_in_process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_bad_input import assert_usage_error
from tests.sweep_helpers import run_in_process

pytestmark = pytest.mark.fast  # make test-fast


def test_a_misspelt_param_on_the_command_line(tiny_setup: dict[str, Path]) -> None:
    result = run_in_process(tiny_setup, "model=tiny", "precision=gptq-int4", "precision.params.grup_size=64")
    assert_usage_error(result, "command line", "precision.params.grup_size", "Did you mean 'group_size'?")
    assert not (tiny_setup["out"] / "mlflow.db").exists()


def test_an_ill_typed_param_in_a_users_precision_file(tiny_setup: dict[str, Path]) -> None:
    path = tiny_setup["conf"] / "precision" / "my-awq.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("name: my-awq\nbackend: llmcompressor\nmethod: awq\nbits: 4\ndescription: mine\n"
                    "params:\n  group_size: 64\n  kernel: fastest\n")
    result = run_in_process(tiny_setup, "model=tiny", "precision=my-awq")
    assert_usage_error(result, "my-awq.yaml:8", "params.kernel", "one of 'auto', 'dense'")
    assert not (tiny_setup["out"] / "mlflow.db").exists()
