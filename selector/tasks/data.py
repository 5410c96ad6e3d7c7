"""Read eval rows from .jsonl, .csv or .parquet files (or a `datasets` folder), keeping every value a
string as written.

Values must reach prompts and metrics exactly as they are in the file: a date stays "2018-03-13",
not a timestamp; a JSON number keeps its text ("3.50" stays "3.50"). Only the fields named in
`list_fields` (a multiple-choice task's `choices_field`) may hold a list of strings.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from selector.errors import EvalsetError

MAX_ROW_BYTES = 1 << 20  # 1 MiB: bigger rows are almost certainly not eval items
SUFFIXES = (".jsonl", ".csv", ".parquet")

Value = str | list[str]


@dataclass
class Row:
    line: int  # 1-based line in the file (Parquet: 1-based row number)
    values: dict[str, Value]


def read_rows(path: Path, list_fields: frozenset[str] = frozenset()) -> list[Row]:
    """All rows of a data file (or a `datasets` save_to_disk folder); raises EvalsetError naming
    file, line and field on bad input."""
    if path.is_dir():
        from selector.tasks.hf_datasets import read_table

        return rows_from_table(path, read_table(path), list_fields)
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return _read_jsonl(path, list_fields)
    if suffix == ".csv":
        return _read_csv(path, list_fields)
    if suffix == ".parquet":
        return _read_parquet(path, list_fields)
    _fail(path, None, None, f"unsupported data file type {suffix!r}: use one of {', '.join(SUFFIXES)}")


def _fail(path: Path, line: int | None, field: str | None, problem: str) -> NoReturn:
    raise EvalsetError(str(path), line, field, problem)


def _text_lines(path: Path) -> list[str]:
    """The file's lines, each checked for size and UTF-8 before anything parses them."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        _fail(path, None, None, f"cannot read data file: {e.strerror or e}")
    lines = []
    for number, chunk in enumerate(raw.split(b"\n"), start=1):
        if len(chunk) > MAX_ROW_BYTES:
            _fail(path, number, None, f"line is {len(chunk)} bytes, over the {MAX_ROW_BYTES} byte limit for one row")
        try:
            text = chunk.decode("utf-8")
        except UnicodeDecodeError as e:
            _fail(path, number, None, f"not valid UTF-8 (bad byte at column {e.start + 1}); save the file as UTF-8")
        lines.append(text.removeprefix("\ufeff") if number == 1 else text)
    return lines


def _check_text(path: Path, line: int, field: str, text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        _fail(path, line, field, "value is not valid Unicode (it holds a lone surrogate escape such as \\ud800)")
    return text


def _value(path: Path, line: int, field: str, value: Any, list_fields: frozenset[str]) -> Value:
    if isinstance(value, str):
        return _check_text(path, line, field, value)
    if field in list_fields:
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return [_check_text(path, line, field, v) for v in value]
        _fail(path, line, field, "must be a non-empty list of strings (the choices of this item)")
    kinds = {bool: "a boolean", type(None): "null", list: "a list", dict: "an object"}
    kind = kinds.get(type(value), type(value).__name__)
    _fail(path, line, field, f"must be a string (numbers are kept as written), got {kind}")


# ---- JSON Lines ----


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _DuplicateKey(key)
        obj[key] = value
    return obj


class _DuplicateKey(ValueError):
    pass


def _read_jsonl(path: Path, list_fields: frozenset[str]) -> list[Row]:
    rows = []
    for number, text in enumerate(_text_lines(path), start=1):
        if not text.strip():
            continue
        try:
            # Numbers keep their text: parse_int/parse_float receive the digits as written.
            obj = json.loads(
                text, parse_int=str, parse_float=str, parse_constant=str, object_pairs_hook=_no_duplicate_keys
            )
        except _DuplicateKey as e:
            _fail(path, number, str(e), "key appears twice in this row")
        except json.JSONDecodeError as e:
            _fail(path, number, None, f"bad JSON: {e.msg} (column {e.colno})")
        except RecursionError:
            _fail(path, number, None, "bad JSON: nested too deeply")
        if not isinstance(obj, dict):
            _fail(path, number, None, f"each line must be a JSON object, got {type(obj).__name__}")
        rows.append(Row(number, {k: _value(path, number, k, v, list_fields) for k, v in obj.items()}))
    return rows


# ---- CSV (a list field is written as a JSON array in its cell) ----


def _read_csv(path: Path, list_fields: frozenset[str]) -> list[Row]:
    text = "\n".join(_text_lines(path))
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if not header:
            return []
        seen: set[str] = set()
        for name in header:
            if not name.strip():
                _fail(path, 1, None, "empty column name in the header")
            if name in seen:
                _fail(path, 1, name, "column appears twice in the header")
            seen.add(name)
        rows = []
        previous_end = reader.line_num
        for record in reader:
            start, previous_end = previous_end + 1, reader.line_num
            if not record or record == [""]:
                continue
            if len(record) != len(header):
                _fail(path, start, None, f"{len(record)} values for {len(header)} header columns")
            values: dict[str, Value] = {}
            for name, cell in zip(header, record):
                values[name] = _csv_list(path, start, name, cell) if name in list_fields else cell
            rows.append(Row(start, values))
    except csv.Error as e:
        _fail(path, reader.line_num, None, f"bad CSV: {e}")
    return rows


def _csv_list(path: Path, line: int, field: str, cell: str) -> Value:
    try:
        parsed = json.loads(cell, parse_int=str, parse_float=str)
    except json.JSONDecodeError:
        _fail(path, line, field, 'in CSV a list is written as a JSON array, e.g. ["yes", "no"]')
    return _value(path, line, field, parsed, frozenset({field}))


# ---- Parquet (Arrow casts each column to strings) ----


def _read_parquet(path: Path, list_fields: frozenset[str]) -> list[Row]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as e:
        _fail(path, None, None, f"not a readable Parquet file: {e}")
    return rows_from_table(path, table, list_fields)


def rows_from_table(path: Path, table: Any, list_fields: frozenset[str]) -> list[Row]:
    """Rows of an Arrow table (Parquet, a datasets folder), every column cast to strings."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(set(table.column_names)) != len(table.column_names):
        _fail(path, None, None, "a column name appears twice")
    columns: dict[str, list[Any]] = {}
    for name, column in zip(table.column_names, table.columns):
        is_list = pa.types.is_list(column.type) or pa.types.is_large_list(column.type)
        target = pa.list_(pa.string()) if is_list else pa.string()
        if is_list and name not in list_fields:
            _fail(path, None, name, "must be a string column, got a list column")
        try:
            columns[name] = pc.cast(column, target).to_pylist()
        except (pa.ArrowException, ValueError) as e:
            _fail(path, None, name, f"column of type {column.type} cannot be read as strings: {e}")
    rows = []
    for index in range(table.num_rows):
        number = index + 1
        values: dict[str, Value] = {}
        size = 0
        for name, column_values in columns.items():
            value = column_values[index]
            if value is None:
                _fail(path, number, name, "missing value (null); rows must fill every column")
            values[name] = _value(path, number, name, value, list_fields)
            size += sum(len(v.encode("utf-8")) for v in (value if isinstance(value, list) else [value]))
        if size > MAX_ROW_BYTES:
            _fail(path, number, None, f"row is {size} bytes, over the {MAX_ROW_BYTES} byte limit for one row")
        rows.append(Row(number, values))
    return rows
