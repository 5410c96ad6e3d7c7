"""kind: gguf — a GGUF file on disk (`path`) or in a hub repo (`repo_id` + `gguf_file`), converted
once to a safetensors folder in the cache.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from selector.errors import UserError
from selector.models.cache import converted_dir, read_json, sha256_file, write_json_atomic
from selector.models.convert import ensure_converted, resolved_from
from selector.models.hub import hub_repo_available
from selector.models.local import local_path
from selector.models.resolved import ResolvedModel
from selector.models.sources import SourceContext

GGUF_MAGIC = b"GGUF"


def is_gguf(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == GGUF_MAGIC


def gguf_problem(path: Path) -> str | None:
    """What is wrong with a GGUF file on disk, in one line, or None: no such file, not GGUF, or a
    header or tensor data cut short (a half-finished download), found before any conversion starts."""
    if not path.is_file():
        return f"{path}: no such GGUF file" if not path.exists() else f"{path}: not a file"
    if not is_gguf(path):
        return f"{path}: not a GGUF file (no GGUF magic bytes)"
    stat = path.stat()
    return _incomplete(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _incomplete(path: str, size: int, mtime_ns: int) -> str | None:
    """Parse the header and tensor table (memory-mapped: nothing is read but the metadata) and check
    that every tensor's bytes lie inside the file. Keyed by size and mtime, so a re-copy is re-read."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path)
        end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
    except Exception:  # the reader fails on a cut-short file with numpy's words, not the file's
        return (f"{path}: truncated or corrupt GGUF file ({size} bytes): its header or tensor data is cut short; "
                "re-download or re-copy it")
    if end > size:
        return f"{path}: truncated GGUF file: its tensors need {end} bytes, the file has {size}; re-download or re-copy it"
    if not reader.tensors:
        return f"{path}: a GGUF file without tensors (no weights)"
    return None


class GgufSource:
    def resolve(self, ctx: SourceContext) -> ResolvedModel:
        recipe = self._recipe(ctx)
        folder = converted_dir(ctx.cache, ctx.label, self._known_sha(ctx, recipe), ctx.dtype)
        if folder is not None:
            return resolved_from(folder, ctx)
        with ctx.cache.lock(ctx.label):
            folder = converted_dir(ctx.cache, ctx.label, self._known_sha(ctx, recipe), ctx.dtype)
            if folder is not None:  # another process finished it while we waited
                return resolved_from(folder, ctx)
            path = self._fetch(ctx)
            sha = self._sha(ctx, recipe, path)
            return ensure_converted(ctx, path, sha, {**recipe, "sha256": sha})

    def is_ready(self, ctx: SourceContext) -> bool:
        """Converted already: resolving reads the cache and writes nothing."""
        return converted_dir(ctx.cache, ctx.label, self._known_sha(ctx, self._recipe(ctx)), ctx.dtype) is not None

    def check_available(self, ctx: SourceContext) -> tuple[bool, str]:
        recipe = self._recipe(ctx)
        folder = converted_dir(ctx.cache, ctx.label, self._known_sha(ctx, recipe), ctx.dtype)
        if folder is not None:
            return True, f"converted copy in {folder}"
        if ctx.source.path:
            path = local_path(ctx)
            problem = gguf_problem(path)
            if problem:
                return False, problem
            return True, f"{path} (converted to {ctx.dtype} safetensors on first use)"
        return hub_repo_available(self._repo(ctx), ctx.source.revision, True, needed_file=str(ctx.source.gguf_file))

    def _recipe(self, ctx: SourceContext) -> dict[str, Any]:
        src = ctx.source
        if src.path:
            return {"kind": "gguf", "path": str(local_path(ctx))}
        return {"kind": "gguf", "repo_id": self._repo(ctx), "gguf_file": src.gguf_file, "revision": src.revision}

    def _repo(self, ctx: SourceContext) -> str:
        if not ctx.source.repo_id or not ctx.source.gguf_file:
            raise ctx.error("path", "kind 'gguf' needs either path (a .gguf file) or repo_id and gguf_file")
        return ctx.source.repo_id

    def _known_sha(self, ctx: SourceContext, recipe: dict[str, Any]) -> str | None:
        """The GGUF's sha256 without reading it: configured, or recorded when it was last hashed
        (for a file on disk, only while its size and mtime are unchanged)."""
        if ctx.source.sha256:
            return ctx.source.sha256.lower()
        record = read_json(ctx.cache.gguf_record(ctx.label))
        if not record or record.get("recipe") != recipe:
            return None
        if "path" in recipe:
            try:
                stat = Path(recipe["path"]).stat()
            except OSError:
                return None
            if [stat.st_size, stat.st_mtime_ns] != [record.get("bytes"), record.get("mtime_ns")]:
                return None
        return record.get("sha256")

    def _fetch(self, ctx: SourceContext) -> Path:
        if ctx.source.path:
            path = local_path(ctx)
            problem = gguf_problem(path)
            if problem:
                raise ctx.error("path", problem)
            return path
        path = _hub_download(self._repo(ctx), str(ctx.source.gguf_file), ctx.source.revision)
        problem = gguf_problem(path)
        if problem:
            raise ctx.error("gguf_file", problem)
        return path

    def _sha(self, ctx: SourceContext, recipe: dict[str, Any], path: Path) -> str:
        sha = self._known_sha(ctx, recipe) if not ctx.source.sha256 else None
        if sha is None:
            sha = sha256_file(path, ctx.progress, desc=f"sha256 {path.name}")
        if ctx.source.sha256 and sha != ctx.source.sha256.lower():
            raise ctx.error("sha256", f"{path} has sha256 {sha}, expected {ctx.source.sha256}")
        stat = path.stat()
        write_json_atomic(ctx.cache.gguf_record(ctx.label), {
            "recipe": recipe, "file": str(path), "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha,
        })
        return sha


def _hub_download(repo_id: str, filename: str, revision: str | None) -> Path:
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(repo_id, filename, revision=revision))
    except Exception as e:  # offline, not found, gated: say which file could not be had
        raise UserError(f"cannot get {filename} from the hub repo {repo_id}: {type(e).__name__}: {e}") from None
