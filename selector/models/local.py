"""kind: local — a transformers model folder on disk, validated before anything loads it."""

from __future__ import annotations

from pathlib import Path

from selector.models.resolved import ResolvedModel
from selector.models.sources import SourceContext
from selector.models.validate import ModelFolderError, validate_folder


def local_path(ctx: SourceContext) -> Path:
    """`source.path` with ~ expanded; a relative path is taken from the working directory."""
    if not ctx.source.path:
        raise ctx.error("path", f"kind '{ctx.source.kind}' needs a path")
    return Path(ctx.source.path).expanduser().resolve()


class LocalSource:
    def resolve(self, ctx: SourceContext) -> ResolvedModel:
        folder = local_path(ctx)
        report = validate_folder(folder, allow_pickle=ctx.model.allow_pickle)
        manifest = {
            "source": {"kind": "local", "path": str(folder)},
            "weight_files": report.weight_files + (report.pickle_files if ctx.model.allow_pickle else []),
            "weight_bytes": report.weight_bytes,
        }
        return ResolvedModel(
            name=ctx.model.name, path=str(folder), is_local=True, prequantized=ctx.prequantized,
            manifest=manifest, kind="local", trust_remote_code=ctx.model.trust_remote_code,
            allow_pickle=ctx.model.allow_pickle,
        )

    def check_available(self, ctx: SourceContext) -> tuple[bool, str]:
        try:
            folder = local_path(ctx)
            validate_folder(folder, allow_pickle=ctx.model.allow_pickle)
        except ModelFolderError as e:
            return False, str(e)
        return True, f"local folder {folder}"
