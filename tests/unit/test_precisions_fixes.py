"""The narrow CPU workarounds, each shown against the failure it prevents."""

from __future__ import annotations

from pathlib import Path

import pytest

from selector.precisions import cpu_fixes


@pytest.mark.parametrize(("cores", "workers"), [(1, 1), (2, 2), (16, 2), (0, 1)])
def test_gptqmodel_workers(cores: int, workers: int) -> None:
    assert cpu_fixes.gptqmodel_cpu_workers(cores) == workers


def test_gptqmodel_workers_env_keeps_a_users_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(cpu_fixes.GPTQMODEL_WORKERS_ENV, raising=False)
    cpu_fixes.set_gptqmodel_workers()
    import os

    assert os.environ[cpu_fixes.GPTQMODEL_WORKERS_ENV] == str(cpu_fixes.gptqmodel_cpu_workers())
    monkeypatch.setenv(cpu_fixes.GPTQMODEL_WORKERS_ENV, "7")
    cpu_fixes.set_gptqmodel_workers()
    assert os.environ[cpu_fixes.GPTQMODEL_WORKERS_ENV] == "7"


def gemma_config():  # type: ignore[no-untyped-def]
    from transformers import Gemma3TextConfig

    return Gemma3TextConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=2, num_key_value_heads=1, head_dim=16)


def add_gptqmodel_strays(config) -> None:  # type: ignore[no-untyped-def]
    # What gptqmodel 7.6's RoPE normaliser leaves at the top of Gemma 3's per-layer-type mapping.
    config.rope_parameters["rope_type"] = "default"
    config.rope_parameters["rope_theta"] = {"global": 1000000.0, "local": 10000.0}


def test_stray_rope_keys_break_saving_and_stripping_fixes_it(tmp_path: Path) -> None:
    config = gemma_config()
    add_gptqmodel_strays(config)
    with pytest.raises(AttributeError):  # transformers' validation: 'str' object has no attribute 'get'
        config.save_pretrained(tmp_path / "broken")
    assert sorted(cpu_fixes.strip_stray_rope_type(config)) == ["rope_theta", "rope_type"]
    assert set(config.rope_parameters) == {"sliding_attention", "full_attention"}
    config.save_pretrained(tmp_path / "fixed")
    from transformers import AutoConfig

    again = AutoConfig.from_pretrained(tmp_path / "fixed")
    assert again.rope_parameters["full_attention"]["rope_theta"] == 1000000.0
    assert again.rope_parameters["sliding_attention"]["rope_theta"] == 10000.0


def test_configs_without_per_layer_rope_are_left_alone() -> None:
    from transformers import LlamaConfig

    config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    before = dict(config.rope_parameters)
    assert cpu_fixes.strip_stray_rope_type(config) == []
    assert config.rope_parameters == before
    clean = gemma_config()
    assert cpu_fixes.strip_stray_rope_type(clean) == []
