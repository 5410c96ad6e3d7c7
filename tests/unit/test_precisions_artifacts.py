"""The quantized-artifact cache: keyed, built once, atomic, locked against concurrent builders."""

from __future__ import annotations

import json
import multiprocessing
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from selector.precisions.artifacts import (
    MANIFEST,
    ArtifactKey,
    base_model_identity,
    materialize,
    read_manifest,
)


def key(**overrides: Any) -> ArtifactKey:
    fields = {"base": {"path": "m", "sha256": "abc"}, "method": "gptq", "params": {"group_size": 64},
              "calibration": {"sha256": "c0ffee", "seq_len": 256}, "versions": {"gptqmodel": "7.6.0"}}
    fields.update(overrides)
    return ArtifactKey("smollm2-135m", "gptq-int4", fields)


def write_checkpoint(out: Path) -> dict[str, Any]:
    (out / "model.safetensors").write_bytes(b"\0" * 128)
    return {"params": {"group_size": 64}}


def test_key_is_stable_and_changes_with_every_field() -> None:
    base = key()
    assert base.digest == key().digest
    assert base.dirname == f"smollm2-135m-gptq-int4-{base.digest[:12]}"
    variants = [
        key(params={"group_size": 128}),
        key(calibration={"sha256": "other", "seq_len": 256}),
        key(calibration={"sha256": "c0ffee", "seq_len": 512}),
        key(versions={"gptqmodel": "7.7.0"}),
        key(base={"path": "m", "sha256": "def"}),
        key(method="awq"),
    ]
    assert len({base.digest, *(v.digest for v in variants)}) == 1 + len(variants)


def test_key_dirname_is_filesystem_safe() -> None:
    k = ArtifactKey("org/model name", "awq:int4", {})
    assert "/" not in k.dirname and " " not in k.dirname and ":" not in k.dirname


def test_built_once_then_cached_untouched(tmp_path: Path) -> None:
    calls: list[Path] = []

    def build(out: Path) -> dict[str, Any]:
        calls.append(out)
        return write_checkpoint(out)

    first = materialize(tmp_path, key(), build)
    assert not first.cached and len(calls) == 1
    assert first.path == tmp_path / "quantized" / key().dirname
    assert calls[0] != first.path  # built elsewhere, renamed into place
    manifest = json.loads((first.path / MANIFEST).read_text())
    assert manifest["digest"] == key().digest and manifest["params"] == {"group_size": 64}
    assert manifest["quantize_s"] >= 0 and manifest["quantize_s"] == first.quantize_s
    mtime = first.path.stat().st_mtime_ns

    second = materialize(tmp_path, key(), build)
    assert second.cached and len(calls) == 1
    assert second.quantize_s == first.quantize_s  # the cost is still reported
    assert second.path.stat().st_mtime_ns == mtime
    assert sorted(p.name for p in (tmp_path / "quantized").iterdir() if not p.name.endswith(".lock")) == [key().dirname]


def test_a_failed_build_leaves_nothing_behind(tmp_path: Path) -> None:
    def broken(out: Path) -> dict[str, Any]:
        (out / "partial.safetensors").write_bytes(b"half")
        raise RuntimeError("quantizer crashed")

    with pytest.raises(RuntimeError, match="quantizer crashed"):
        materialize(tmp_path, key(), broken)
    left = [p.name for p in (tmp_path / "quantized").iterdir() if not p.name.endswith(".lock")]
    assert left == []
    assert not materialize(tmp_path, key(), write_checkpoint).cached  # and the next run builds


def test_a_folder_without_manifest_is_rebuilt(tmp_path: Path) -> None:
    stale = tmp_path / "quantized" / key().dirname
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"from an interrupted older version")
    art = materialize(tmp_path, key(), write_checkpoint)
    assert not art.cached and read_manifest(art.path) is not None
    assert (art.path / "model.safetensors").read_bytes() == b"\0" * 128


def _slow_build(out: Path) -> dict[str, Any]:
    counter = out.parent.parent / "builds.txt"
    with counter.open("a") as f:
        f.write("build\n")
    time.sleep(1.0)
    return write_checkpoint(out)


def _worker(cache_dir: str, results: Any) -> None:
    art = materialize(Path(cache_dir), key(), _slow_build)
    results.put(art.cached)


def test_concurrent_processes_build_once(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(str(tmp_path), results)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    assert all(p.exitcode == 0 for p in procs)
    cached = sorted(results.get(timeout=5) for _ in procs)
    assert cached == [False, True, True]
    assert (tmp_path / "builds.txt").read_text().count("build") == 1


@dataclass
class Resolved:
    path: str
    is_local: bool = True
    revision: str | None = None
    manifest: dict[str, Any] = field(default_factory=dict)


def test_identity_prefers_the_content_hash(tmp_path: Path) -> None:
    ident = base_model_identity(Resolved(str(tmp_path), manifest={"sha256": "f" * 64}))
    assert ident["sha256"] == "f" * 64 and "weights" not in ident
    # what selector.models writes for a model converted from GGUF
    converted = base_model_identity(Resolved(str(tmp_path), manifest={"format": 2, "gguf": {"sha256": "e" * 64}}))
    assert converted["sha256"] == "e" * 64 and converted["converter_format"] == 2


def test_identity_of_a_local_folder_follows_its_files(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"hidden_size": 64}')
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"\0" * 16)
    before = base_model_identity(Resolved(str(tmp_path)))
    assert before == base_model_identity(Resolved(str(tmp_path)))
    weights.write_bytes(b"\1" * 32)
    assert base_model_identity(Resolved(str(tmp_path))) != before
    (tmp_path / "config.json").write_text('{"hidden_size": 96}')
    assert base_model_identity(Resolved(str(tmp_path)))["config_sha256"] != before["config_sha256"]
