"""Check a model folder before anything loads it: config.json parses, weights are safetensors whose
headers parse and whose tensors fit in the file, and a sharded index names shards that exist.

A truncated download or a half-copied folder is caught here with the file and what is wrong,
instead of as a cryptic error (or silently wrong weights) deep inside transformers.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from selector.errors import UserError
from selector.models.resolved import PICKLE_SUFFIXES

INDEX_NAME = "model.safetensors.index.json"


class ModelFolderError(UserError):
    def __init__(self, path: Path, problem: str) -> None:
        self.path, self.problem = path, problem
        super().__init__(f"{path}: {problem}")


@dataclass
class FolderReport:
    folder: Path
    weight_files: list[str] = field(default_factory=list)
    pickle_files: list[str] = field(default_factory=list)
    tensors: int = 0
    weight_bytes: int = 0


def validate_folder(folder: Path, allow_pickle: bool = False) -> FolderReport:
    """Raise ModelFolderError naming the file at fault; return what the folder holds."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelFolderError(folder, "not a folder" if folder.exists() else "no such folder")
    _check_config(folder / "config.json")

    report = FolderReport(folder)
    files = sorted(p for p in folder.iterdir() if p.is_file())
    report.pickle_files = [p.name for p in files if p.suffix in PICKLE_SUFFIXES]
    safetensors = [p for p in files if p.suffix == ".safetensors"]
    if report.pickle_files and not allow_pickle:
        raise ModelFolderError(
            folder,
            f"pickle files {report.pickle_files} can run arbitrary code when loaded; they are refused. "
            "Convert the checkpoint to safetensors (or remove those files), or set allow_pickle: true in "
            "the model config if you trust where they came from.",
        )
    if not safetensors and not (allow_pickle and report.pickle_files):
        raise ModelFolderError(folder, "no weights: expected *.safetensors files next to config.json")

    names_by_file: dict[str, set[str]] = {}
    for path in safetensors:
        header = read_safetensors_header(path)
        names_by_file[path.name] = set(header)
        report.tensors += len(header)
        report.weight_bytes += path.stat().st_size
    report.weight_files = [p.name for p in safetensors]
    if allow_pickle:
        report.weight_bytes += sum((folder / n).stat().st_size for n in report.pickle_files)

    index = folder / INDEX_NAME
    if index.exists():
        _check_index(index, names_by_file)
    elif any("-of-" in p.name for p in safetensors):
        raise ModelFolderError(folder, f"sharded safetensors files but no {INDEX_NAME}")
    return report


def _check_config(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ModelFolderError(path.parent, "no config.json: not a transformers model folder")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise ModelFolderError(path, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ModelFolderError(path, f"line {e.lineno}, column {e.colno}: invalid JSON ({e.msg})") from None
    if not isinstance(config, dict):
        raise ModelFolderError(path, f"expected a JSON object, found {type(config).__name__}")
    return config


def read_safetensors_header(path: Path) -> dict[str, dict[str, Any]]:
    """Open the file with the safetensors library, which checks that its header parses and that the
    tensors' byte ranges fit their dtypes and shapes and cover the file exactly.

    Returns tensor name -> {"dtype", "shape"}; a bad file raises ModelFolderError saying what to do."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(path, framework="numpy") as f:
            slices = {name: f.get_slice(name) for name in f.keys()}
            return {name: {"dtype": s.get_dtype(), "shape": s.get_shape()} for name, s in slices.items()}
    except SafetensorError as e:
        raise ModelFolderError(path, _explain(str(e), path.stat().st_size)) from None


# The library's words (as safetensors 0.8 puts them) -> what a user can act on; anything else is passed on.
_PROBLEMS = (
    ("header too small", "only {size} bytes: too short for a safetensors header (truncated?)"),
    ("invalid header length", "the header length it declares does not fit in its {size} bytes: "
                              "truncated or not safetensors"),
    ("header too large", "declares a header over safetensors' 100 MB limit: not a safetensors file?"),
    ("incomplete metadata", "the tensors its header lists do not cover its {size} bytes exactly: the file is "
                            "truncated (re-download or re-copy it)"),
    ("invalid shape, data type, or offset", "a tensor's byte range does not fit its dtype and shape: corrupt header"),
    ("invalid offset", "a tensor's byte range does not start where the previous one ends: corrupt header"),
    ("invalid JSON", "header is not valid JSON ({detail}): not a safetensors file?"),
)


def _explain(message: str, size: int) -> str:
    detail = message.rsplit("header: ", 1)[-1]
    dtype = re.search(r"unknown variant `([^`]*)`", message)
    if dtype:
        return f"unknown dtype {dtype.group(1)!r} (not one safetensors knows)"
    return next((text.format(size=size, detail=detail) for words, text in _PROBLEMS if words in message),
                f"not a valid safetensors file ({detail})")


def _check_index(index: Path, names_by_file: dict[str, set[str]]) -> None:
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
        weight_map = data["weight_map"]
        if not isinstance(weight_map, dict):
            raise TypeError
    except json.JSONDecodeError as e:
        raise ModelFolderError(index, f"line {e.lineno}, column {e.colno}: invalid JSON ({e.msg})") from None
    except (KeyError, TypeError, UnicodeDecodeError):
        raise ModelFolderError(index, "expected a JSON object with a 'weight_map' object") from None
    missing = sorted(set(weight_map.values()) - set(names_by_file))
    if missing:
        raise ModelFolderError(index, f"names shards that are not in the folder: {missing}")
    for tensor, shard in weight_map.items():
        if tensor not in names_by_file[shard]:
            raise ModelFolderError(index, f"maps tensor {tensor!r} to {shard}, which does not contain it")
