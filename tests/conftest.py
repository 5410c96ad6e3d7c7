"""Test tiers, declared as markers in pyproject.toml:

- `slow`: over a minute on 2 CPU cores (`-m "not slow"` leaves them out);
- `gpu`: needs a CUDA device; skipped, saying so, where there is none;
- `quant(*modules)`: needs the quantization extra (all of it, or the modules named); skipped with
  the install command where they are absent, so a core install runs everything else
  (tests/tiers.py marks parametrized precisions by their backend);
- `browser`: drives a real headless Chromium.

Builders for records and configs live in tests/factories.py: plain functions, because hypothesis
strategies and module-level data call them outside any test.
"""

from __future__ import annotations

import pytest

from tests.tiers import QUANT_EXTRA, missing_quant


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("quant"):
        missing = missing_quant(*mark.args)
        if missing:
            pytest.skip(f"{QUANT_EXTRA} ({', '.join(missing)} not installed)")
    if item.get_closest_marker("gpu") is not None:
        import torch

        if not torch.cuda.is_available():
            pytest.skip(f"needs a CUDA device (torch {torch.__version__} sees none)")
