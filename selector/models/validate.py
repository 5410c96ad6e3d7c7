"""Check a model folder before anything loads it: config.json parses, weights are safetensors whose
headers parse and whose tensors fit in the file, and a sharded index names shards that exist.

A truncated download or a half-copied folder is caught here with the file and what is wrong,
instead of as a cryptic error (or silently wrong weights) deep inside transformers.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from selector.errors import UserError
from selector.models.resolved import PICKLE_SUFFIXES

INDEX_NAME = "model.safetensors.index.json"
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors format's own limit

# Bytes per element of each safetensors dtype (sub-byte types are counted in bits below).
DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64,
    "C64": 64,
}


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
    """Parse a safetensors header (8-byte little-endian length + JSON) and check every tensor's
    byte range lies inside the file and matches its dtype and shape. Returns name -> entry."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        raw_len = f.read(8)
        if len(raw_len) < 8:
            raise ModelFolderError(path, f"only {size} bytes: too short for a safetensors header (truncated?)")
        (header_len,) = struct.unpack("<Q", raw_len)
        if header_len > MAX_HEADER_BYTES or 8 + header_len > size:
            raise ModelFolderError(
                path, f"header claims {header_len} bytes but the file has {size}: truncated or not safetensors"
            )
        raw = f.read(header_len)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelFolderError(path, f"header is not valid JSON ({e}): not a safetensors file?") from None
    if not isinstance(header, dict):
        raise ModelFolderError(path, "header is not a JSON object")
    header.pop("__metadata__", None)

    data_bytes = size - 8 - header_len
    for name, entry in header.items():
        try:
            dtype, shape, (begin, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise ModelFolderError(path, f"tensor {name!r}: malformed header entry {entry!r}") from None
        if dtype not in DTYPE_BITS:
            raise ModelFolderError(path, f"tensor {name!r}: unknown dtype {dtype!r}")
        if end > data_bytes:
            raise ModelFolderError(
                path, f"tensor {name!r} ends at byte {end} of the data but the file holds only {data_bytes} data "
                "bytes: the file is truncated (re-download or re-copy it)"
            )
        expected = math.ceil(math.prod(shape) * DTYPE_BITS[dtype] / 8)
        if not 0 <= begin <= end or end - begin != expected:
            raise ModelFolderError(
                path, f"tensor {name!r}: byte range [{begin}, {end}) does not fit {dtype}{list(shape)} ({expected} bytes)"
            )
    return header


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
