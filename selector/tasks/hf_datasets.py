"""Eval rows from a Hugging Face `datasets` folder (what `Dataset.save_to_disk` or
`DatasetDict.save_to_disk` wrote), used as a task's `data:`.

Every column is read as strings, the way the Parquet reader does it: a value reaches prompts and
metrics as the dataset stores it (an int64 3 becomes "3"). A DatasetDict folder is read through
its `test` split, or its only split; otherwise `data:` names the split's subfolder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NoReturn

from selector.errors import EvalsetError

DATASET_FILES = ("dataset_info.json", "state.json")  # save_to_disk of one Dataset
DICT_FILE = "dataset_dict.json"  # save_to_disk of a DatasetDict: one Dataset folder per split
PREFERRED_SPLIT = "test"


def _fail(path: Path, field: str | None, problem: str) -> NoReturn:
    raise EvalsetError(str(path), None, field, problem)


def is_dataset_folder(path: Path) -> bool:
    """A folder written by `save_to_disk` (a Dataset or a DatasetDict)."""
    path = Path(path)
    return path.is_dir() and ((path / DICT_FILE).is_file() or all((path / f).is_file() for f in DATASET_FILES))


def split_folder(path: Path) -> Path:
    """The Dataset folder to read: `path` itself, or the chosen split of a DatasetDict."""
    if not (path / DICT_FILE).is_file():
        return path
    try:
        splits = json.loads((path / DICT_FILE).read_text())["splits"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        _fail(path / DICT_FILE, None, f"not a datasets DatasetDict index: {e}")
    if PREFERRED_SPLIT in splits:
        return path / PREFERRED_SPLIT
    if len(splits) == 1:
        return path / splits[0]
    _fail(path, None, f"this DatasetDict has the splits {', '.join(splits)} and none is named "
          f"{PREFERRED_SPLIT!r}: name one in data:, e.g. data: {path.name}/{splits[0]}")


def read_table(path: Path) -> Any:
    """The split's rows as a pyarrow Table (indices mappings already applied)."""
    import datasets

    folder = split_folder(Path(path))
    try:
        loaded = datasets.load_from_disk(str(folder))
    except Exception as e:  # datasets raises FileNotFoundError, ValueError, ArrowInvalid...
        _fail(folder, None, f"not a readable datasets folder: {type(e).__name__}: {str(e).splitlines()[0]}")
    if isinstance(loaded, datasets.DatasetDict):  # a DatasetDict inside a split folder: unusual, but say so
        _fail(folder, None, "holds a DatasetDict: name one of its splits in data:")
    return loaded.with_format("arrow")[:]
