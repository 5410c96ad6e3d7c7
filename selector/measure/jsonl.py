"""Reading request files: JSON Lines, and the error that names the file, line and field."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from selector.errors import EvalsetError


class RequestFileError(EvalsetError):
    """A bad request file: path:line: field 'x': problem (the eval sets' format)."""


def json_lines(path: Path, shown: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line, object) for every line of a JSON Lines file that is not blank; a line that is not a
    JSON object stops the read, naming it."""
    with path.open(encoding="utf-8") as f:
        for line, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except json.JSONDecodeError as e:
                raise RequestFileError(shown, line, None, f"not valid JSON: {e.msg}") from None
            if not isinstance(row, dict):
                raise RequestFileError(shown, line, None, "each line must be a JSON object")
            yield line, row
