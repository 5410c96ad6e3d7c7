"""Local model folders are checked before anything loads them: config.json, safetensors headers,
shard index, and pickles refused unless allowed."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from selector import models
from selector.config import ModelConfig, SourceConfig
from selector.errors import UserError
from selector.models.validate import ModelFolderError, read_safetensors_header, validate_folder

CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32, "vocab_size": 100}


def tensors(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "model.embed_tokens.weight": rng.standard_normal((100, 32)).astype(np.float32),
        "model.norm.weight": np.ones(32, dtype=np.float16),
    }


def make_folder(root: Path, name: str = "m") -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIG))
    save_file(tensors(), str(folder / "model.safetensors"))
    return folder


def make_sharded(root: Path) -> Path:
    folder = root / "sharded"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIG))
    parts = tensors()
    save_file({"model.embed_tokens.weight": parts["model.embed_tokens.weight"]},
              str(folder / "model-00001-of-00002.safetensors"))
    save_file({"model.norm.weight": parts["model.norm.weight"]}, str(folder / "model-00002-of-00002.safetensors"))
    index = {"metadata": {}, "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
                                            "model.norm.weight": "model-00002-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def local_model(folder: Path, allow_pickle: bool = False) -> ModelConfig:
    return ModelConfig(name="tiny-local", source=SourceConfig(kind="local", path=str(folder)), allow_pickle=allow_pickle)


def test_a_valid_folder_reports_its_weights(tmp_path: Path) -> None:
    folder = make_folder(tmp_path)
    report = validate_folder(folder)
    assert report.weight_files == ["model.safetensors"]
    assert report.tensors == 2
    assert report.weight_bytes == (folder / "model.safetensors").stat().st_size


def test_resolve_local_gives_offline_safetensors_only_load_kwargs(tmp_path: Path) -> None:
    folder = make_folder(tmp_path)
    resolved = models.resolve(local_model(folder), tmp_path / "cache")
    assert resolved.path == str(folder.resolve())
    assert resolved.is_local and not resolved.prequantized and resolved.kind == "local"
    assert resolved.load_kwargs() == {"trust_remote_code": False, "local_files_only": True, "use_safetensors": True}
    assert resolved.artifact_bytes() == (folder / "model.safetensors").stat().st_size
    assert resolved.manifest["weight_files"] == ["model.safetensors"]


def test_config_json_that_is_not_json_names_file_and_line(tmp_path: Path) -> None:
    folder = make_folder(tmp_path)
    (folder / "config.json").write_text('{\n  "model_type": "llama",\n  oops\n}')
    with pytest.raises(ModelFolderError) as err:
        validate_folder(folder)
    assert str(err.value).startswith(str(folder / "config.json"))
    assert "line 3" in str(err.value)


def test_config_json_must_be_an_object(tmp_path: Path) -> None:
    folder = make_folder(tmp_path)
    (folder / "config.json").write_text("[1, 2]")
    with pytest.raises(ModelFolderError, match="expected a JSON object, found list"):
        validate_folder(folder)


def test_missing_config_and_missing_folder(tmp_path: Path) -> None:
    folder = make_folder(tmp_path)
    (folder / "config.json").unlink()
    with pytest.raises(ModelFolderError, match="no config.json"):
        validate_folder(folder)
    with pytest.raises(ModelFolderError, match="no such folder"):
        validate_folder(tmp_path / "absent")


def test_pickle_weights_are_refused_unless_allowed(tmp_path: Path) -> None:
    folder = tmp_path / "pickled"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIG))
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04not really a pickle")
    with pytest.raises(ModelFolderError) as err:
        models.resolve(local_model(folder), tmp_path / "cache")
    assert "pytorch_model.bin" in str(err.value) and "allow_pickle" in str(err.value)
    assert isinstance(err.value, UserError)

    resolved = models.resolve(local_model(folder, allow_pickle=True), tmp_path / "cache")
    assert "use_safetensors" not in resolved.load_kwargs()
    assert resolved.artifact_bytes() == (folder / "pytorch_model.bin").stat().st_size


def test_a_pickle_next_to_safetensors_is_still_refused(tmp_path: Path) -> None:
    folder = make_folder(tmp_path)
    (folder / "training_args.bin").write_bytes(b"\x80\x04")
    ok, why = models.check_available(local_model(folder), cache_dir=tmp_path / "cache")
    assert not ok and "training_args.bin" in why


def test_no_weights_at_all(tmp_path: Path) -> None:
    folder = make_folder(tmp_path)
    (folder / "model.safetensors").unlink()
    with pytest.raises(ModelFolderError, match="no weights"):
        validate_folder(folder)


def test_truncated_safetensors_is_caught(tmp_path: Path) -> None:
    folder = make_folder(tmp_path)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:-100])
    with pytest.raises(ModelFolderError) as err:
        validate_folder(folder)
    assert str(err.value).startswith(str(weights)) and "truncated" in str(err.value)


def test_file_cut_inside_the_header(tmp_path: Path) -> None:
    folder = make_folder(tmp_path)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:20])
    with pytest.raises(ModelFolderError, match="truncated or not safetensors"):
        validate_folder(folder)
    weights.write_bytes(b"abc")
    with pytest.raises(ModelFolderError, match="too short"):
        validate_folder(folder)


def test_not_a_safetensors_file(tmp_path: Path) -> None:
    folder = make_folder(tmp_path)
    body = b"this is not json at all"
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(body)) + body)
    with pytest.raises(ModelFolderError, match="not valid JSON"):
        validate_folder(folder)


def write_raw(path: Path, header: dict, data: bytes) -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


def test_byte_range_must_match_dtype_and_shape(tmp_path: Path) -> None:
    path = tmp_path / "x.safetensors"
    write_raw(path, {"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}}, b"\0" * 16)
    with pytest.raises(ModelFolderError, match="byte range does not fit its dtype and shape"):
        read_safetensors_header(path)
    write_raw(path, {"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}, b"\0" * 16)
    assert read_safetensors_header(path) == {"w": {"dtype": "F32", "shape": [2, 2]}}
    write_raw(path, {"w": {"dtype": "Q7", "shape": [2], "data_offsets": [0, 2]}}, b"\0" * 2)
    with pytest.raises(ModelFolderError, match="unknown dtype 'Q7'"):
        read_safetensors_header(path)


def test_a_header_length_past_the_end_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "x.safetensors"
    path.write_bytes(struct.pack("<Q", 4096) + b'{"w": {}}')
    with pytest.raises(ModelFolderError) as err:
        read_safetensors_header(path)
    assert str(err.value) == (f"{path}: the header length it declares does not fit in its 17 bytes: "
                              "truncated or not safetensors")


def test_tensors_must_cover_the_file_exactly(tmp_path: Path) -> None:
    path = tmp_path / "x.safetensors"
    write_raw(path, {"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 12)  # 4 stray bytes
    with pytest.raises(ModelFolderError, match="do not cover its .* bytes exactly"):
        read_safetensors_header(path)


def test_float8_e4m3fnuz_weights_are_valid(tmp_path: Path) -> None:
    """A dtype newer than a hand-kept table (ROCm's FP8) is whatever the safetensors library knows."""
    import torch
    from safetensors.torch import save_file as save_torch

    folder = make_folder(tmp_path)
    save_torch({"model.norm.weight": torch.ones(32).to(torch.float8_e4m3fnuz)}, str(folder / "model.safetensors"))
    report = validate_folder(folder)
    assert report.tensors == 1
    assert read_safetensors_header(folder / "model.safetensors") == {
        "model.norm.weight": {"dtype": "F8_E4M3FNUZ", "shape": [32]}}


def test_sharded_folder_with_index_is_valid(tmp_path: Path) -> None:
    report = validate_folder(make_sharded(tmp_path))
    assert report.tensors == 2 and len(report.weight_files) == 2


def test_index_naming_a_missing_shard(tmp_path: Path) -> None:
    folder = make_sharded(tmp_path)
    (folder / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(ModelFolderError) as err:
        validate_folder(folder)
    assert "model.safetensors.index.json" in str(err.value)
    assert "model-00002-of-00002.safetensors" in str(err.value)


def test_index_mapping_a_tensor_to_the_wrong_shard(tmp_path: Path) -> None:
    folder = make_sharded(tmp_path)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ModelFolderError, match="'model.norm.weight' to model-00001-of-00002.safetensors"):
        validate_folder(folder)


def test_shards_without_an_index(tmp_path: Path) -> None:
    folder = make_sharded(tmp_path)
    (folder / "model.safetensors.index.json").unlink()
    with pytest.raises(ModelFolderError, match="no model.safetensors.index.json"):
        validate_folder(folder)


def test_local_kind_needs_a_path(tmp_path: Path) -> None:
    model = ModelConfig(name="no-path", source=SourceConfig(kind="local"))
    with pytest.raises(UserError, match="model.source.path"):
        models.resolve(model, tmp_path)
