"""What resolving a model source gives the loaders: a folder (or hub id) and how to load it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WEIGHT_SUFFIXES = (".safetensors",)
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")


@dataclass
class ResolvedModel:
    name: str
    path: str  # a local folder, or a hub repo id
    revision: str | None = None
    is_local: bool = True
    prequantized: bool = False
    manifest: dict[str, Any] = field(default_factory=dict)
    kind: str = ""  # the source kind it came from: hub | local | gguf | pypi-gguf
    trust_remote_code: bool = False
    allow_pickle: bool = False

    def load_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `from_pretrained` of both the model and the tokenizer."""
        kwargs: dict[str, Any] = {"trust_remote_code": self.trust_remote_code}
        if self.revision:
            kwargs["revision"] = self.revision
        if self.is_local:
            kwargs["local_files_only"] = True
        if not self.allow_pickle:
            # transformers then never falls back to a pickled .bin checkpoint (which could run code).
            kwargs["use_safetensors"] = True
        return kwargs

    def artifact_bytes(self) -> int | None:
        """Bytes of weight files on disk; None for a hub model that is not in the local cache."""
        folder = Path(self.path) if self.is_local else _hub_snapshot(self.path, self.revision)
        if folder is None or not folder.is_dir():
            return None
        suffixes = WEIGHT_SUFFIXES + (PICKLE_SUFFIXES if self.allow_pickle else ())
        files = [f for f in folder.iterdir() if f.is_file() and f.suffix in suffixes]
        return sum(f.stat().st_size for f in files) if files else None


def _hub_snapshot(repo_id: str, revision: str | None) -> Path | None:
    """The local snapshot folder of a hub repo, without touching the network."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, revision=revision, local_files_only=True))
    except Exception:  # not cached, or no huggingface_hub: the size is simply unknown
        return None
