"""The engine seam, typed and checked.

- mypy over the engine seam and what a variant's run passes through it: the files [tool.mypy]
  `files` in pyproject.toml lists (the one list; `make types` checks the same), clean. About a
  minute on 2 cores with a cold cache (mypy's cache goes to a temporary folder, so no state a
  previous run left is read): marked slow, outside the fast tier.
- every registered kind is a concrete Engine over an EngineConfig, and every Running kind
  implements what Running declares abstract: one that leaves a method out cannot be built.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # a whole-program type check: about a minute, outside the inner loop
def test_mypy_is_clean_on_the_engine_seam(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="mypy is in the dev extra: make install-dev")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy-cache")],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )
    assert result.returncode == 0, "mypy found type errors:\n" + result.stdout[-12000:] + result.stderr[-4000:]


def test_every_kind_is_a_concrete_engine_over_an_engine_config() -> None:
    from selector.config import EngineConfig
    from selector.engines import ENGINES, engine_class, engine_for
    from selector.engines.spec import Engine

    for kind in ENGINES.names():
        cls = engine_class(kind)
        assert issubclass(cls, Engine) and not cls.__abstractmethods__, kind
        assert issubclass(cls.Config, EngineConfig) and dataclasses.is_dataclass(cls.Config), kind
        config = cls.Config()
        assert config.kind == kind
        assert type(engine_for(config)) is cls


def test_every_running_kind_implements_the_seam() -> None:
    from selector.engines.inprocess.engine import InProcessRunning
    from selector.engines.scripted import ScriptedRunning
    from selector.engines.served.running import ServedRunning
    from selector.engines.spec import Running
    from selector.engines.vllm.engine import VllmRunning

    assert {"generate", "loglikelihood", "render", "session", "rebatched", "token_logprobs", "memory", "info",
            "stop"} <= Running.__abstractmethods__
    for cls in (InProcessRunning, ScriptedRunning, ServedRunning, VllmRunning):
        assert not cls.__abstractmethods__, cls.__name__

    class Partial(Running):  # a kind that forgot what serving it held, and the rest
        def generate(self, requests, progress=None):  # type: ignore[no-untyped-def]
            return []

    with pytest.raises(TypeError, match="abstract.*memory"):
        Partial()  # type: ignore[abstract]
