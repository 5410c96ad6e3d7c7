"""A task's `data:` can be a folder written by datasets' save_to_disk (a Dataset or a DatasetDict)."""

from __future__ import annotations

from pathlib import Path

import pytest

from selector.errors import EvalsetError
from selector.tasks import load_evalset
from selector.tasks.hf_datasets import is_dataset_folder

datasets = pytest.importorskip("datasets")

ROWS = [{"id": "a1", "when": "2018-03-13", "n": 3, "price": "3.50", "q": "First?"},
        {"id": "a2", "when": "2019-01-01", "n": 12, "price": "4", "q": "Second?"}]


def _task(folder: Path, name: str, data: str, extra: str = "") -> None:
    (folder / f"{name}.yaml").write_text(f"data: {data}\nprompt: '{{{{ q }}}} ({{{{ when }}}}, {{{{ n }}}})'\n"
                                         f"target: '{{{{ when }}}}'\n{extra}")


def test_dataset_and_datasetdict_folders_load_with_values_as_strings(tmp_path: Path) -> None:
    rows = datasets.Dataset.from_list(ROWS)
    rows.shuffle(seed=3).save_to_disk(str(tmp_path / "single"))  # an indices mapping: rows in shuffled order
    datasets.DatasetDict({"test": rows, "train": rows.select([1])}).save_to_disk(str(tmp_path / "dict"))
    _task(tmp_path, "single", "single")
    _task(tmp_path, "whole", "dict")
    _task(tmp_path, "split", "dict/train")
    assert is_dataset_folder(tmp_path / "single") and is_dataset_folder(tmp_path / "dict")
    tasks = {t.name: t for t in load_evalset(tmp_path)}
    whole = tasks["whole"]
    assert [i.fields for i in whole.items] == [{k: str(v) for k, v in r.items()} for r in ROWS]
    assert whole.items[0].prompts["plain"] == "First? (2018-03-13, 3)" and whole.items[0].targets["plain"] == "2018-03-13"
    assert [i.line for i in whole.items] == [1, 2]  # row numbers, as for Parquet
    assert [i.id for i in tasks["split"].items] == ["a2"]
    assert sorted(i.id for i in tasks["single"].items) == ["a1", "a2"]
    assert [i.id for i in tasks["single"].items] == list(datasets.load_from_disk(str(tmp_path / "single"))["id"])


def test_a_datasetdict_without_a_test_split_must_name_one(tmp_path: Path) -> None:
    rows = datasets.Dataset.from_list(ROWS)
    datasets.DatasetDict({"train": rows, "validation": rows}).save_to_disk(str(tmp_path / "dd"))
    _task(tmp_path, "t", "dd")
    with pytest.raises(EvalsetError, match="splits train, validation") as e:
        load_evalset(tmp_path)
    assert "data: dd/train" in str(e.value)


def test_a_plain_folder_is_not_data(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    _task(tmp_path, "t", "notes")
    with pytest.raises(EvalsetError, match="save_to_disk") as e:
        load_evalset(tmp_path)
    assert e.value.field == "data" and e.value.line == 1


def test_missing_values_name_the_row_and_field(tmp_path: Path) -> None:
    datasets.Dataset.from_list([ROWS[0], {**ROWS[1], "when": None}]).save_to_disk(str(tmp_path / "holes"))
    _task(tmp_path, "t", "holes")
    with pytest.raises(EvalsetError, match="missing value") as e:
        load_evalset(tmp_path)
    assert (e.value.line, e.value.field) == (2, "when")
