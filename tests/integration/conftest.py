from __future__ import annotations

from pathlib import Path

import pytest

from tests.scripted import write_scripted_engine
from tests.tiny import build_tiny_llama, write_model_config


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def shared_model_cache() -> Path:
    """The model cache selector itself uses here (`$SELECTOR_CACHE`, else ~/.cache/selector), shared
    by the tests that need an offline model: each model is converted once per suite, by whichever
    test of whichever worker asks first, under the cache's per-model lock; the others wait and reuse
    it. (tests/integration/test_models_offline.py converts SmolLM2 into a fresh folder every time.)"""
    from selector.models.cache import default_cache_dir

    return default_cache_dir()


@pytest.fixture
def tiny_setup(tmp_path: Path, tiny_model_dir: Path) -> dict[str, Path]:
    """A user's config folder with model=tiny, and fresh output and cache folders."""
    write_model_config(tmp_path / "conf", "tiny", tiny_model_dir)
    return {"base": tmp_path, "conf": tmp_path / "conf", "out": tmp_path / "out", "cache": tmp_path / "cache"}


@pytest.fixture
def scripted(tiny_setup: dict[str, Path]) -> str:
    """engine/scripted-tiny.yaml in tiny_setup's config folder, and the override that picks it: a
    sweep on it runs without a model (tests/scripted.py)."""
    write_scripted_engine(tiny_setup["conf"])
    return "engine=scripted-tiny"
