"""An lm-evaluation-harness task YAML as read: its keys (with file and line for errors), its local
data files with every value a string as written, and lm-eval's own rules for Jinja, literal
choice lists and its defaults. importer.py and mapping.py build a selector task from it."""

from __future__ import annotations

import ast
import glob
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml
from jinja2 import StrictUndefined
from jinja2.sandbox import SandboxedEnvironment

from selector.yaml_lines import yaml_line
from selector.errors import EvalsetError
from selector.tasks.data import read_rows

LMEVAL_MAX_GEN_TOKS = 256  # lm-eval's default when generation_kwargs leaves it out
_JINJA = SandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=True)
UNSUPPORTED = ("process_docs", "use_prompt", "doc_to_image", "doc_to_audio", "custom_dataset", "process_results")
SELECTOR_SCORED = ("numeric", "contains", "f1", "exact_match")  # via an exported <task>_utils.process_results


class FunctionRef(str):
    """A `!function module.name` value: Python code selector does not run."""


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_constructor("!function", lambda loader, node: FunctionRef(loader.construct_scalar(node)))


@dataclass
class ImportedTask:
    name: str
    spec: dict[str, Any]  # the selector task file's keys
    rows: list[dict[str, Any]]
    fewshot_rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # where selector's reading differs from lm-eval's

    def yaml_text(self) -> str:
        from selector.tasks.lmeval.export import dump_yaml

        notes = "".join(f"# note: {n}\n" for n in self.notes)
        return f"# Imported from an lm-evaluation-harness task by selector.\n{notes}{dump_yaml(self.spec)}"

    def write(self, out_dir: str | Path) -> Path:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        fewshot_file = (self.spec.get("fewshot") or {}).get("data")
        for rows, name in ((self.rows, self.spec["data"]), (self.fewshot_rows, fewshot_file)):
            if name:
                (out / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        path = out / f"{self.name}.yaml"
        path.write_text(self.yaml_text(), encoding="utf-8")
        return path


class Source:
    """The task YAML (with its includes merged), failing with the file and line of a key."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.raw = self._load(path, set())

    def _load(self, path: Path, seen: set[Path]) -> dict[str, Any]:
        if path.resolve() in seen:
            raise EvalsetError(str(path), None, "include", "include cycle")
        try:
            raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)
        except (OSError, yaml.YAMLError) as e:
            raise EvalsetError(str(path), getattr(getattr(e, "problem_mark", None), "line", -1) + 1 or None, None,
                               f"cannot read the task YAML: {e}") from None
        if not isinstance(raw, dict):
            raise EvalsetError(str(path), 1, None, "an lm-eval task file must be a YAML mapping")
        includes = raw.pop("include", [])
        merged: dict[str, Any] = {}
        for inc in includes if isinstance(includes, list) else [includes]:
            merged.update(self._load(path.parent / str(inc), seen | {path.resolve()}))
        return {**merged, **raw}

    def fail(self, key: str | None, problem: str) -> NoReturn:
        raise EvalsetError(str(self.path), yaml_line(self.path, [key]) if key else None, key, problem)

    def get(self, key: str, default: Any = None) -> Any:
        return self.raw.get(key, default)


def selector_utils(src: Source, ref: Any, function: str) -> bool:
    """A `!function` that a selector export wrote (its `<task>_utils.py` copy of lmeval_scoring)."""
    if not isinstance(ref, FunctionRef) or not ref.endswith("." + function):
        return False
    module = src.path.parent / (ref.rsplit(".", 1)[0].replace(".", "/") + ".py")
    return module.is_file() and "Helpers that travel with a task exported for lm-evaluation-harness" in module.read_text()


def _read_json(path: Path, key: str | None) -> list[dict[str, Any]]:
    """JSON lines or one JSON array (or {key: [...]}) with numbers kept as written."""
    text = path.read_text(encoding="utf-8")
    parse = dict(parse_int=str, parse_float=str, parse_constant=str)
    try:
        if key or text.lstrip().startswith("["):  # one JSON document: an array, or {key: [...]}
            data = json.loads(text, **parse)
            rows = data[key] if key else data
            numbered = [(None, r) for r in rows]
        else:
            numbered = [(n, json.loads(line, **parse)) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise EvalsetError(str(path), getattr(e, "lineno", None), key, f"not JSON lines or a JSON array: {e}") from None
    return [strings(path, line, row) for line, row in numbered]


def strings(path: Path, line: int | None, row: Any) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise EvalsetError(str(path), line, None, "each row must be a JSON object")
    out: dict[str, Any] = {}
    for k, v in row.items():
        if v is None:  # a missing value: the field is absent from this row (an error only if a template reads it)
            continue
        if isinstance(v, bool):
            v = "true" if v else "false"  # the JSON text, as written
        if isinstance(v, list) and all(isinstance(x, str) for x in v):
            out[k] = v
        elif isinstance(v, str):
            out[k] = v
        else:
            kind = type(v).__name__
            raise EvalsetError(str(path), line, k, f"{kind} values cannot be imported: selector rows hold strings "
                               "(and lists of strings for choices); flatten or drop this field")
    return out


def data_files(src: Source) -> dict[str, list[Path]]:
    files = (src.get("dataset_kwargs") or {}).get("data_files")
    if files is None:
        src.fail("dataset_kwargs", "needs data_files: selector imports local-file tasks (dataset_path: json, csv "
                 "or parquet with dataset_kwargs: {data_files: ...}); download Hub datasets first")
    by_split = files if isinstance(files, dict) else {"train": files}  # datasets names a bare list "train"
    out: dict[str, list[Path]] = {}
    for split, names in by_split.items():
        paths = []
        for name in names if isinstance(names, list) else [names]:
            # lm-eval resolves relative paths from the working directory; the task's folder is tried first.
            for base in (src.path.parent, Path.cwd()):
                found = sorted(Path(p) for p in glob.glob(str(base / str(name))))
                if found:
                    paths += found
                    break
            else:
                src.fail("dataset_kwargs",
                         f"data file {name!r} ({split}) not found beside the task or in the working directory")
        out[str(split)] = paths
    return out


def rows_of(src: Source, paths: list[Path], list_fields: frozenset[str]) -> list[dict[str, Any]]:
    key = (src.get("dataset_kwargs") or {}).get("field")
    rows: list[dict[str, Any]] = []
    for path in paths:
        if path.suffix.lower() in (".json", ".jsonl"):
            rows += _read_json(path, key)
        else:
            rows += [r.values for r in read_rows(path, list_fields)]
    return rows


def field_or_template(value: Any, columns: set[str], src: Source, key: str) -> str:
    if not isinstance(value, str) or isinstance(value, FunctionRef):
        src.fail(key, f"must be a Jinja template or a column name to import (got {type(value).__name__}: {value!r})")
    return "{{ " + value + " }}" if value in columns and re.fullmatch(r"[A-Za-z_]\w*", value) else value


def render(template: str, row: dict[str, Any]) -> str:
    return _JINJA.from_string(template).render(**row)


def literal_list(src: Source, text: str, key: str) -> list[str]:
    """lm-eval evaluates a rendered doc_to_choice with ast.literal_eval."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        src.fail(key, f"renders to {text[:80]!r}, which is not a Python list literal")
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
        src.fail(key, f"renders to {text[:80]!r}, not a list of strings")
    return [str(v) for v in value]
