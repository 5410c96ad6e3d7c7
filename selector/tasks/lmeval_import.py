"""Import an lm-evaluation-harness task YAML (a local-file task) as a selector task.

The rows are read with every value a string as written and copied beside the new task YAML as
JSONL. Where lm-eval's meaning needs data (per-row choices from a Jinja expression, an answer
given as an index into the choices), it is computed here with lm-eval's rules and stored in an
extra column (`_choices`, `_target`, `_id`), so the task file stays plain. What selector cannot
reproduce exactly is listed in `notes`; what it cannot run at all raises EvalsetError.
"""

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

from selector.config import yaml_line
from selector.errors import EvalsetError
from selector.tasks.data import read_rows

LMEVAL_MAX_GEN_TOKS = 256  # lm-eval's default when generation_kwargs leaves it out
_JINJA = SandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=True)
_UNSUPPORTED = ("process_docs", "use_prompt", "doc_to_image", "doc_to_audio", "custom_dataset", "process_results")
_SCORING = {"exact_match": "exact_match", "acc": "choice_accuracy", "acc_norm": "choice_accuracy"}
_SELECTOR_SCORED = ("numeric", "contains", "f1", "exact_match")  # via an exported <task>_utils.process_results


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
        from selector.tasks.lmeval import dump_yaml

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


class _Source:
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


def _selector_utils(src: _Source, ref: Any, function: str) -> bool:
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
    return [_strings(path, line, row) for line, row in numbered]


def _strings(path: Path, line: int | None, row: Any) -> dict[str, Any]:
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


def _data_files(src: _Source) -> dict[str, list[Path]]:
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


def _rows(src: _Source, paths: list[Path], list_fields: frozenset[str]) -> list[dict[str, Any]]:
    key = (src.get("dataset_kwargs") or {}).get("field")
    rows: list[dict[str, Any]] = []
    for path in paths:
        if path.suffix.lower() in (".json", ".jsonl"):
            rows += _read_json(path, key)
        else:
            rows += [r.values for r in read_rows(path, list_fields)]
    return rows


def _field_or_template(value: Any, columns: set[str], src: _Source, key: str) -> str:
    if not isinstance(value, str) or isinstance(value, FunctionRef):
        src.fail(key, f"must be a Jinja template or a column name to import (got {type(value).__name__}: {value!r})")
    return "{{ " + value + " }}" if value in columns and re.fullmatch(r"[A-Za-z_]\w*", value) else value


def _render(template: str, row: dict[str, Any]) -> str:
    return _JINJA.from_string(template).render(**row)


def import_task(yaml_path: str | Path) -> ImportedTask:
    """Read an lm-eval task YAML into a selector task (spec + rows); nothing is written."""
    src = _Source(Path(yaml_path))
    for key in _UNSUPPORTED:
        if key in src.raw and not (_selector_utils(src, src.raw[key], "load_jsonl" if key == "custom_dataset"
                                                   else "process_results")):
            src.fail(key, f"{key} is Python code or a prompt library that selector does not run; "
                     "rewrite it as Jinja doc_to_text/doc_to_target or preprocess the data file")
    path = src.get("dataset_path")
    if path not in (None, "json", "csv", "parquet") and "custom_dataset" not in src.raw:
        src.fail("dataset_path", f"{path!r}: selector imports local files only (json, csv, parquet)")
    choices_field = src.get("doc_to_choice") if isinstance(src.get("doc_to_choice"), str) else None
    splits = {s: _rows(src, p, frozenset([choices_field] if choices_field else [])) for s, p in _data_files(src).items()}
    from selector.tasks.lmeval_mapping import build_spec  # it reads lm-eval's keys with the helpers above

    return build_spec(src, splits)


def import_to_folder(yaml_paths: list[str | Path], out_dir: str | Path) -> list[tuple[Path, list[str]]]:
    """Import each lm-eval task YAML into out_dir (a selector eval set folder): (task file, notes).
    Each written task is loaded back, so a problem shows now, with its file and line."""
    from selector.tasks.loader import load_evalset

    written = []
    for path in yaml_paths:
        imported = import_task(path)
        written.append((imported.write(out_dir), imported.notes))
        load_evalset(out_dir, tasks=[imported.name])
    return written


def literal_list(src: _Source, text: str, key: str) -> list[str]:
    """lm-eval evaluates a rendered doc_to_choice with ast.literal_eval."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        src.fail(key, f"renders to {text[:80]!r}, which is not a Python list literal")
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
        src.fail(key, f"renders to {text[:80]!r}, not a list of strings")
    return [str(v) for v in value]
