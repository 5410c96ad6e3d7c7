"""The load and server configs compose, validate, and their command templates render."""

from __future__ import annotations

import pytest

from selector.compose import compose as _compose
from selector.serving.process import render_command

VALUES = {"model_path": "cache/models/my model", "port": 8123, "host": "127.0.0.1", "dtype": "bfloat16",
          "served_model": "variant"}


@pytest.mark.parametrize("name", ["load", "load-quick"])
def test_measure_load_configs(name: str) -> None:
    cfg = _compose([f"measure={name}"])
    load = cfg.measure.load
    assert load.enabled and load.concurrency and load.requests_per_level > 0 and load.new_tokens > 0
    assert load.max_batch_size >= 1 and load.max_queue_delay_ms >= 0
    assert cfg.measure.latency.enabled  # the rest of the measurements stay as in the config they extend
    slo = _compose([f"measure={name}", "+measure.load.slo.e2e_ms=4000"]).measure.load.slo
    assert slo == {"e2e_ms": 4000.0}


@pytest.mark.parametrize("name", ["openai", "openai-transformers", "openai-vllm"])
def test_openai_engine_configs(name: str) -> None:
    engine = _compose([f"engine={name}"]).engine
    assert engine.kind == "openai" and engine.batch_size >= 1 and engine.api_key_env is None
    if engine.server_command is None:
        assert engine.base_url and engine.base_url.endswith("/v1")
        return
    argv = render_command(engine.server_command, VALUES)
    assert "cache/models/my model" in argv  # one argument, spaces and all
    assert argv[argv.index("--port") + 1] == "8123" and argv[argv.index("--host") + 1] == "127.0.0.1"
