"""What each test tier needs; tests/conftest.py turns the markers into skips with a reason."""

from __future__ import annotations

import importlib.util

import pytest

QUANT_EXTRA = "needs the quant extra: pip install -e '.[quant]'"
# The quant extra's modules behind each precision backend (transformers loads gptqmodel's
# checkpoints through optimum, and llmcompressor's through compressed-tensors).
QUANT_BY_BACKEND: dict[str, tuple[str, ...]] = {
    "native": (),
    "bnb": ("bitsandbytes",),
    "torchao": ("torchao",),
    "gptqmodel": ("gptqmodel", "optimum"),
    "llmcompressor": ("llmcompressor", "compressed_tensors"),
}
QUANT_MODULES = tuple(dict.fromkeys(m for modules in QUANT_BY_BACKEND.values() for m in modules))


# Seconds each heavy test file takes on a quiet 2-core machine (its tests' junit times summed):
# tests/conftest.py hands the heaviest out first, so that the workers of `make test` finish
# together. Re-measure when a file here gets much lighter or heavier.
FILE_SECONDS: dict[str, float] = {  # junit times of make test, 2-core Xeon, 2026-12-04 (at 014c1b0)
    "tests/integration/test_precisions_smollm2.py": 361,
    "tests/integration/test_vllm_engine.py": 237,
    "tests/integration/test_readme.py": 230,
    "tests/integration/test_launchers_ray.py": 144,
    "tests/integration/test_faults.py": 113,
    "tests/integration/test_load_traffic.py": 91,
    "tests/integration/test_memory_phases.py": 83,
    "tests/integration/test_engine_fast.py": 74,
    "tests/integration/test_models_command_line.py": 67,
    "tests/integration/test_wheel.py": 66,
    "tests/integration/test_sweep_smollm2.py": 58,
    # not from the junit run above: 91 s on a busy 2-core machine where test_memory_phases took 139 s
    "tests/integration/test_sweep_preparation.py": 55,
    "tests/unit/test_types.py": 60,  # mypy, cold cache (alone on a busy 2-core machine: 45-50 s)
    "tests/unit/test_load_capacity.py": 55,
    "tests/integration/test_tracking_server.py": 54,
    "tests/integration/test_vllm_faults.py": 53,
    "tests/integration/test_openai_sweep.py": 52,
    "tests/integration/test_mlflow_ui.py": 51,
    # not from the junit run above: alone, on a quiet 2-core machine (the tiny model's build included)
    "tests/integration/test_load_answers.py": 53,
    "tests/integration/test_serving_settings.py": 45,
    "tests/integration/test_gpu_check.py": 42,
    "tests/integration/test_notebook.py": 38,
    "tests/integration/test_search_adaptive.py": 35,
    "tests/integration/test_launchers_joblib.py": 34,
    "tests/integration/test_precisions_backends.py": 32,
    "tests/integration/test_models_offline.py": 30,
    "tests/integration/test_sweep_tiny.py": 30,
    "tests/integration/test_policy_flow.py": 28,
    "tests/integration/test_precisions_sweep_kernel.py": 23,
    "tests/integration/test_console_log.py": 21,
    "tests/integration/test_api.py": 20,
    "tests/integration/test_openai_process.py": 20,
    "tests/integration/test_cli_commands.py": 20,
}


def file_seconds(file: str) -> float:
    """The seconds FILE_SECONDS gives a test file (its path from the repository root), else 0."""
    return FILE_SECONDS.get(file, 0.0)


def missing_vllm() -> str | None:
    """Why a real vLLM server cannot start here (the one line selector itself prints), or None."""
    from selector.engines.vllm.engine import VllmConfig
    from selector.errors import ConfigError
    from selector.engines.vllm.launch import python_for

    try:
        python_for(VllmConfig())
    except ConfigError as e:
        return str(e)
    return None


def missing_quant(*modules: str) -> list[str]:
    """Those of `modules` (default: the whole extra) that are not installed."""
    return [m for m in modules or QUANT_MODULES if importlib.util.find_spec(m) is None]


def backend_case(backend: str, *values: object) -> object:
    """A parametrize case that needs what `backend` needs: `pytest.param(*values)` marked `quant`."""
    marks = [pytest.mark.quant(*QUANT_BY_BACKEND[backend])] if QUANT_BY_BACKEND[backend] else []
    return pytest.param(*values, marks=marks)


def precision_case(name: str, *values: object) -> object:
    """A parametrize case for a shipped precision (`name` first, then `values`), marked by its backend."""
    from tests.factories import shipped_precision

    return backend_case(shipped_precision(name).backend, name, *values)
