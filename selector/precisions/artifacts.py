"""The cache of locally quantized checkpoints: quantize once, reuse on every later sweep.

An artifact lives in `<cache_dir>/quantized/<model>-<precision>-<hash12>/` where the hash covers
everything that changes its bytes: the base model's identity, the method and its parameters, the
calibration data and the library versions. It is written to a temporary folder next to its final
place and renamed into place only once complete (a rename is atomic on one filesystem), so a crash
never leaves a half-written artifact that a later run would trust. A file lock serialises two
processes that want the same artifact: the second waits and then finds it built.

The manifest (selector-artifact.json) is written last and records what the build cost
(`quantize_s`), so a cached run can still report it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

MANIFEST = "selector-artifact.json"
LOCK_TIMEOUT_S = 6 * 3600  # a 1.5B AWQ pass on 2 cores takes ~30 min; a 14B one far longer


@dataclass(frozen=True)
class ArtifactKey:
    model: str
    precision: str
    fields: dict[str, Any]  # JSON-able; every value that changes the artifact's bytes

    @property
    def digest(self) -> str:
        blob = json.dumps(self.fields, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(blob.encode()).hexdigest()

    @property
    def dirname(self) -> str:
        return f"{_safe(self.model)}-{_safe(self.precision)}-{self.digest[:12]}"


@dataclass
class Artifact:
    path: Path
    manifest: dict[str, Any]
    cached: bool  # True when it was already on disk (nothing was quantized in this call)

    @property
    def quantize_s(self) -> float | None:
        return self.manifest.get("quantize_s")


def materialize(cache_dir: Path, key: ArtifactKey, build: Callable[[Path], dict[str, Any]]) -> Artifact:
    """Return the artifact for `key`, calling `build(tmp_dir)` to create it if it is not cached.

    `build` writes a loadable checkpoint into the folder it is given and returns extra manifest
    fields (e.g. the parameters actually used). Its wall time is recorded as `quantize_s`.
    """
    from filelock import FileLock

    root = Path(cache_dir) / "quantized"
    root.mkdir(parents=True, exist_ok=True)
    final = root / key.dirname
    found = read_manifest(final)
    if found is not None:
        return Artifact(final, found, cached=True)
    with FileLock(str(root / f"{key.dirname}.lock"), timeout=LOCK_TIMEOUT_S):
        found = read_manifest(final)  # another process may have built it while we waited
        if found is not None:
            return Artifact(final, found, cached=True)
        if final.exists():  # a folder without a manifest is not ours to trust: rebuild it
            shutil.rmtree(final)
        tmp = root / f".{key.dirname}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            t0 = time.perf_counter()
            extra = build(tmp)
            quantize_s = round(time.perf_counter() - t0, 3)
            manifest = {
                "key": key.fields,
                "digest": key.digest,
                "model": key.model,
                "precision": key.precision,
                "quantize_s": quantize_s,
                "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                **extra,
            }
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return Artifact(final, manifest, cached=False)


def read_manifest(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def base_model_identity(resolved: Any) -> dict[str, Any]:
    """What identifies the base weights: a content hash when the resolver has one, else the files.

    Models converted from GGUF carry the GGUF's sha256 (and the converter's format version) in
    their manifest. For a local folder without one we use config.json's text plus each weight
    file's name, size and mtime (hashing gigabytes of weights on every run would cost more than it
    is worth; a rewritten file changes its mtime). A hub model is its repo id and revision.
    """
    manifest = getattr(resolved, "manifest", None) or {}
    ident: dict[str, Any] = {"path": str(resolved.path), "revision": getattr(resolved, "revision", None)}
    gguf = manifest.get("gguf") if isinstance(manifest.get("gguf"), dict) else {}
    sha = manifest.get("sha256") or gguf.get("sha256")
    if sha:
        ident.update(sha256=sha, converter_format=manifest.get("format"))
        return ident
    folder = Path(str(resolved.path))
    if getattr(resolved, "is_local", False) and folder.is_dir():
        config = folder / "config.json"
        ident["config_sha256"] = hashlib.sha256(config.read_bytes()).hexdigest() if config.is_file() else None
        ident["weights"] = sorted(
            (f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in folder.glob("*.safetensors")
        )
    return ident


def library_versions(*names: str) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("torch", "transformers", *names):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    return out


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "x"
