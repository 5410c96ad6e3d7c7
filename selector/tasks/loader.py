"""Load an eval set: a folder of task YAML files, each pointing at its rows.

Everything is checked here, before any model loads: the YAML keys and their types, every row
(rendered through the prompt and target templates), ids, choices and what the metric needs.
Problems raise EvalsetError naming the file, the 1-based line and the field.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml
from jinja2 import Template, TemplateSyntaxError

from selector.config import yaml_line
from selector.errors import EvalsetError
from selector.registry import UnknownNameError
from selector.tasks import templates
from selector.tasks.data import SUFFIXES, Row, read_rows
from selector.tasks.hf_datasets import is_dataset_folder
from selector.tasks.metrics import Metric, MetricArgError, get_metric

STYLES = ("chat", "plain")
TYPES = ("generate", "multiple_choice")
PROMPT_STYLES = ("model", *STYLES)
KEYS = (
    "name", "description", "type", "data", "id_field", "prompt", "target", "choices", "choices_field",
    "system", "fewshot", "prompt_style", "prompt_style_overrides", "target_delimiter", "fewshot_delimiter",
    "stop", "max_new_tokens", "metric", "metric_args",
)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass
class Item:
    id: str
    fields: dict[str, str]  # the row as written (a multiple-choice list field is in `choices`)
    line: int  # 1-based line of the row in its data file
    choices: list[str] | None = None  # this item's choices, when the task reads them from a row field
    prompts: dict[str, str] = field(default_factory=dict)  # style -> rendered prompt (no few-shot)
    targets: dict[str, str] = field(default_factory=dict)  # style -> rendered gold answer


@dataclass
class Task:
    name: str
    description: str
    type: str  # generate | multiple_choice
    data: str  # as written in the YAML, relative to it
    id_field: str
    prompt: dict[str, str]  # style -> template source
    target: dict[str, str]  # style -> template source
    choices: list[str] | None
    choices_field: str | None
    system: str | None
    fewshot_n: int
    fewshot_data: str | None
    prompt_style: str  # model | chat | plain
    prompt_style_overrides: dict[str, str]
    target_delimiter: str
    fewshot_delimiter: str
    stop: dict[str, list[str]]  # style -> stop sequences
    max_new_tokens: int
    metric: str
    metric_args: dict[str, Any]  # with the metric's defaults filled in
    source: Path  # the task YAML file
    items: list[Item] = field(default_factory=list)
    fewshot: list[Item] = field(default_factory=list)

    def choices_for(self, item: Item) -> list[str]:
        return item.choices if item.choices is not None else list(self.choices or [])

    def spec(self) -> dict[str, Any]:
        """The task definition as plain data, without file-system paths or rows."""
        return {
            "name": self.name, "description": self.description, "type": self.type, "data": self.data,
            "id_field": self.id_field, "prompt": self.prompt, "target": self.target, "choices": self.choices,
            "choices_field": self.choices_field, "system": self.system,
            "fewshot": {"n": self.fewshot_n, "data": self.fewshot_data} if self.fewshot_data else None,
            "prompt_style": self.prompt_style, "prompt_style_overrides": self.prompt_style_overrides,
            "target_delimiter": self.target_delimiter, "fewshot_delimiter": self.fewshot_delimiter,
            "stop": self.stop, "max_new_tokens": self.max_new_tokens, "metric": self.metric,
            "metric_args": self.metric_args,
        }


# ---- the folder ----


def load_evalset(path: str | Path, tasks: list[str] | None = None, limit: int | None = None) -> list[Task]:
    """The tasks of an eval set folder, sorted by name; `limit` keeps the first N items of each."""
    folder = Path(path)
    if not folder.is_dir():
        problem = "not a folder" if folder.exists() else "eval set folder not found"
        raise EvalsetError(str(folder), None, None, problem)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise EvalsetError(str(folder), None, "limit", f"must be a positive integer, got {limit!r}")
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in (".yaml", ".yml"))
    if not files:
        raise EvalsetError(str(folder), None, None, "no task files (*.yaml) in this folder")
    specs: dict[str, _Spec] = {}
    for file in files:
        spec = _read_spec(file)
        if spec.name in specs:
            other = specs[spec.name].path.name
            spec.fail("name", f"task name {spec.name!r} is also used by {other}")
        specs[spec.name] = spec
    wanted = sorted(specs) if tasks is None else _select(folder, tasks, sorted(specs))
    loaded = [_load_task(specs[name]) for name in wanted]
    if limit is not None:
        for task in loaded:
            task.items = task.items[:limit]
    return loaded


def _select(folder: Path, tasks: list[str], known: list[str]) -> list[str]:
    if isinstance(tasks, str) or not all(isinstance(t, str) for t in tasks):
        raise EvalsetError(str(folder), None, "tasks", f"must be a list of task names, got {tasks!r}")
    if not tasks:
        raise EvalsetError(str(folder), None, "tasks", "is empty: name at least one task, or leave it unset for all")
    for name in tasks:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=3)
            hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
            raise EvalsetError(str(folder), None, "tasks", f"unknown task {name!r}.{hint} Known: {', '.join(known)}.")
    return sorted(set(tasks))


def evalset_hash(tasks: list[Task]) -> str:
    """sha256 over task specs and rows: changes whenever anything that affects scores changes."""
    digest = hashlib.sha256()
    for task in sorted(tasks, key=lambda t: t.name):
        payload = {
            "spec": task.spec(),
            "items": [[i.id, i.fields, i.choices] for i in task.items],
            "fewshot": [[i.id, i.fields, i.choices] for i in task.fewshot],
        }
        digest.update(json.dumps(payload, sort_keys=True, ensure_ascii=True).encode("ascii"))
    return digest.hexdigest()


# ---- one task file ----


class _Spec:
    """A task YAML file, its keys validated one by one (errors point at the key's line)."""

    def __init__(self, path: Path, raw: dict[str, Any]) -> None:
        self.path, self.raw = path, raw

    def fail(self, key: str, problem: str, sub: str | None = None) -> NoReturn:
        line = yaml_line(self.path, [key, sub] if sub else [key]) or yaml_line(self.path, [key])
        raise EvalsetError(str(self.path), line, key, problem)

    def string(self, key: str, default: Any = ..., allowed: tuple[str, ...] = (), nullable: bool = False) -> Any:
        if key not in self.raw:
            if default is ...:
                self.fail(key, "is required")
            return default
        value = self.raw[key]
        if value is None and nullable:
            return None
        if not isinstance(value, str):
            self.fail(key, f"must be a string{_quote_hint(value)}, got {_kind(value)}")
        if allowed and value not in allowed:
            self.fail(key, f"must be one of {', '.join(allowed)}, got {value!r}")
        return value

    def per_style(self, key: str, default: Any = ...) -> dict[str, str]:
        """A string for both styles, or a mapping {chat: ..., plain: ...}."""
        value = self.raw.get(key, default)
        if value is ...:
            self.fail(key, "is required")
        if isinstance(value, str):
            return {style: value for style in STYLES}
        if isinstance(value, dict):
            if set(value) != set(STYLES):
                self.fail(key, f"as a mapping needs exactly the keys chat and plain, got {', '.join(map(str, value))}")
            for style in STYLES:
                if not isinstance(value[style], str):
                    got = value[style]
                    self.fail(key, f"{style} must be a string{_quote_hint(got)}, got {_kind(got)}", style)
            return dict(value)
        self.fail(key, f"must be a string or a mapping {{chat: ..., plain: ...}}, got {_kind(value)}")

    def string_list(self, key: str, value: Any, sub: str | None = None) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            bad = next((v for v in value if not isinstance(v, str)), None) if isinstance(value, list) else value
            self.fail(key, f"must be a list of strings{_quote_hint(bad)}", sub)
        return list(value)

    def integer(self, key: str, value: Any, minimum: int, sub: str | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.fail(key, f"must be an integer >= {minimum}, got {value!r}", sub)
        return value

    @property
    def name(self) -> str:
        return self.raw["name"]


def _kind(value: Any) -> str:
    return {bool: "a boolean", int: "a number", float: "a number", type(None): "null", list: "a list",
            dict: "a mapping"}.get(type(value), type(value).__name__)


def _quote_hint(value: Any) -> str:
    # YAML 1.1 reads yes/no/on/off as booleans and 1.0 as a number: quoting keeps them text.
    return f" (quote it: YAML read {value!r} as {_kind(value)})" if isinstance(value, (bool, int, float)) else ""


def _read_spec(path: Path) -> _Spec:
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise EvalsetError(str(path), None, None, f"not valid UTF-8 (bad byte at offset {e.start})") from None
    try:
        node = yaml.compose(text)
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise EvalsetError(str(path), mark.line + 1 if mark else None, None, f"bad YAML: {problem}") from None
    if not isinstance(raw, dict):
        raise EvalsetError(str(path), 1, None, f"a task file must be a YAML mapping, got {_kind(raw)}")
    assert isinstance(node, yaml.MappingNode)
    seen: set[Any] = set()
    for key_node, _ in node.value:  # PyYAML keeps the last of duplicate keys silently
        if key_node.value in seen:
            raise EvalsetError(str(path), key_node.start_mark.line + 1, str(key_node.value), "key appears twice")
        seen.add(key_node.value)
    spec = _Spec(path, raw)
    for key in raw:
        if key not in KEYS:
            close = difflib.get_close_matches(str(key), KEYS, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            spec.fail(str(key), f"unknown key.{hint} Known keys: {', '.join(KEYS)}")
    raw["name"] = spec.string("name", default=path.stem)
    if not _NAME.match(raw["name"]):
        spec.fail("name", f"{raw['name']!r} must be letters, digits, '_', '-' or '.' (it names files and metrics)")
    return spec


def _load_task(spec: _Spec) -> Task:
    task_type = spec.string("type", default="generate", allowed=TYPES)
    metric_name = spec.string("metric", default="choice_accuracy" if task_type == "multiple_choice" else "exact_match")
    try:
        metric = get_metric(metric_name)
    except UnknownNameError as e:
        spec.fail("metric", str(e))
    if metric.multiple_choice != (task_type == "multiple_choice"):
        spec.fail("metric", f"metric {metric_name!r} does not score {task_type} tasks"
                  + (" (use choice_accuracy)" if task_type == "multiple_choice" else ""))
    metric_args_raw = spec.raw.get("metric_args") or {}
    if not isinstance(metric_args_raw, dict):
        spec.fail("metric_args", f"must be a mapping, got {_kind(metric_args_raw)}")
    try:
        metric_args = metric.resolve_args(metric_args_raw)
    except MetricArgError as e:
        spec.fail("metric_args", e.problem, e.arg)

    choices, choices_field = _choices(spec, task_type)
    task = Task(
        name=spec.name,
        description=spec.string("description", default=""),
        type=task_type,
        data=spec.string("data"),
        id_field=spec.string("id_field", default="id"),
        prompt=spec.per_style("prompt"),
        target=spec.per_style("target"),
        choices=choices,
        choices_field=choices_field,
        system=spec.string("system", default=None, nullable=True),
        fewshot_n=0,
        fewshot_data=None,
        prompt_style=spec.string("prompt_style", default="model", allowed=PROMPT_STYLES),
        prompt_style_overrides=_overrides(spec),
        target_delimiter=spec.string("target_delimiter", default=" "),
        fewshot_delimiter=spec.string("fewshot_delimiter", default="\n\n"),
        stop=_stop(spec),
        max_new_tokens=spec.integer("max_new_tokens", spec.raw.get("max_new_tokens", 32), 1),
        metric=metric_name,
        metric_args=metric_args,
        source=spec.path,
    )
    if not task.id_field:
        spec.fail("id_field", "must not be empty")
    _fewshot_spec(spec, task)

    compiled = {key: {s: _compile(spec, key, getattr(task, key)[s], s) for s in STYLES} for key in ("prompt", "target")}
    needs = {v: key for key in ("prompt", "target") for s in STYLES for v in templates.variables(getattr(task, key)[s])}
    needs.update({f: "metric" for f in metric.required_fields(metric_args)})
    renderer = _Renderer(task, compiled, needs, metric, metric_args)

    data_path = _data_path(spec, "data", task.data)
    rows = read_rows(data_path, frozenset([choices_field]) if choices_field else frozenset())
    if not rows:
        raise EvalsetError(str(data_path), None, None, f"task {task.name!r} has no rows")
    task.items = [renderer.item(data_path, row, require_id=True) for row in rows]
    _unique_ids(data_path, task)
    if task.fewshot_data is not None:
        few_path = _data_path(spec, "fewshot", task.fewshot_data, sub="data")
        few_rows = read_rows(few_path, frozenset([choices_field]) if choices_field else frozenset())
        if len(few_rows) < task.fewshot_n:
            spec.fail("fewshot", f"n is {task.fewshot_n} but {few_path.name} has {len(few_rows)} rows", "n")
        task.fewshot = [renderer.item(few_path, row, require_id=False) for row in few_rows[: task.fewshot_n]]
        _no_leak(few_path, task)
    return task


def _choices(spec: _Spec, task_type: str) -> tuple[list[str] | None, str | None]:
    has_list, has_field = "choices" in spec.raw, "choices_field" in spec.raw
    if task_type != "multiple_choice":
        if has_list or has_field:
            spec.fail("choices" if has_list else "choices_field", "only multiple_choice tasks have choices")
        return None, None
    if has_list == has_field:
        problem = "a multiple_choice task needs exactly one of choices or choices_field"
        spec.fail("choices" if has_list else "type", problem)
    if has_field:
        name = spec.string("choices_field")
        if not name:
            spec.fail("choices_field", "must not be empty")
        return None, name
    choices = spec.string_list("choices", spec.raw["choices"])
    _check_choice_list(choices, lambda problem: spec.fail("choices", problem))
    return choices, None


def _check_choice_list(choices: list[str], fail: Any) -> None:
    if len(choices) < 2:
        fail(f"needs at least 2 choices, got {len(choices)}")
    if len(set(choices)) != len(choices):
        fail("choices must be distinct")
    if any(not c for c in choices):
        fail("a choice is empty")


def _overrides(spec: _Spec) -> dict[str, str]:
    value = spec.raw.get("prompt_style_overrides") or {}
    if not isinstance(value, dict):
        spec.fail("prompt_style_overrides", f"must be a mapping of model name -> chat|plain, got {_kind(value)}")
    for model, style in value.items():
        if not isinstance(model, str) or style not in STYLES:
            spec.fail("prompt_style_overrides", f"{model!r}: must map a model name to chat or plain, got {style!r}",
                      str(model))
    return dict(value)


def _stop(spec: _Spec) -> dict[str, list[str]]:
    value = spec.raw.get("stop") or []
    if isinstance(value, dict):
        unknown = set(value) - set(STYLES)
        if unknown:
            spec.fail("stop", f"as a mapping takes the keys chat and plain, got {', '.join(map(str, unknown))}")
        stops = {s: spec.string_list("stop", value.get(s) or [], s) for s in STYLES}
    else:
        stops = {s: spec.string_list("stop", value) for s in STYLES}
    if any(not stop for per_style in stops.values() for stop in per_style):
        spec.fail("stop", "an empty stop sequence would end every generation at once")
    return stops


def _fewshot_spec(spec: _Spec, task: Task) -> None:
    value = spec.raw.get("fewshot")
    if value is None:
        return
    if not isinstance(value, dict):
        spec.fail("fewshot", f"must be a mapping {{n: 3, data: file.jsonl}}, got {_kind(value)}")
    unknown = set(value) - {"n", "data"}
    if unknown:
        spec.fail("fewshot", f"unknown key {sorted(map(str, unknown))[0]!r} (fewshot takes n and data)")
    if "data" not in value or not isinstance(value["data"], str):
        spec.fail("fewshot", "data must name a file of examples, relative to the task file", "data")
    task.fewshot_n = spec.integer("fewshot", value.get("n", 0), 0, "n")
    task.fewshot_data = value["data"]


def _compile(spec: _Spec, key: str, source: str, style: str) -> Template:
    try:
        return templates.compile_template(source)
    except TemplateSyntaxError as e:
        sub = style if isinstance(spec.raw.get(key), dict) else None
        spec.fail(key, f"template error ({style} style, template line {e.lineno}): {e.message}", sub)


def _data_path(spec: _Spec, key: str, relative: str, sub: str | None = None) -> Path:
    path = spec.path.parent / relative
    if is_dataset_folder(path):  # written by datasets' save_to_disk
        return path
    if path.suffix.lower() not in SUFFIXES:
        spec.fail(key, f"data file {relative!r} must end in one of {', '.join(SUFFIXES)} "
                  "or be a folder written by datasets' save_to_disk", sub)
    if not path.is_file():
        spec.fail(key, f"data file not found: {path}", sub)
    return path


def _unique_ids(path: Path, task: Task) -> None:
    first_line: dict[str, int] = {}
    for item in task.items:
        if item.id in first_line:
            raise EvalsetError(str(path), item.line, task.id_field,
                               f"duplicate id {item.id!r} (first on line {first_line[item.id]})")
        first_line[item.id] = item.line


def _no_leak(path: Path, task: Task) -> None:
    """A few-shot example that is also a scored item would hand the model its answer."""
    scored = {item.prompts[s]: item for item in task.items for s in STYLES}
    for example in task.fewshot:
        for style in STYLES:
            twin = scored.get(example.prompts[style])
            if twin is not None:
                raise EvalsetError(str(path), example.line, None,
                                   f"this few-shot example is also scored item {twin.id!r} "
                                   f"({Path(task.data).name} line {twin.line})")


@dataclass
class _Renderer:
    """Turns a row into an Item, rendering its prompt and target in both styles (so template and
    data errors surface at load time, with the row's line)."""

    task: Task
    compiled: dict[str, dict[str, Template]]
    needs: dict[str, str]  # field -> what uses it
    metric: Metric
    metric_args: dict[str, Any]

    def item(self, path: Path, row: Row, require_id: bool) -> Item:
        task, values = self.task, row.values
        fail = lambda field, problem: _row_fail(path, row.line, field, problem)  # noqa: E731
        if task.id_field in values:
            item_id = values[task.id_field]
            if not isinstance(item_id, str) or not item_id.strip():
                fail(task.id_field, "id must be a non-empty string")
        elif require_id:
            fail(task.id_field, "missing id field (set id_field in the task file if the ids are elsewhere)")
        else:
            item_id = f"{path.name}:{row.line}"
        choices = None
        if task.choices_field is not None:
            if task.choices_field not in values:
                fail(task.choices_field, "missing choices field")
            listed = values[task.choices_field]
            if not isinstance(listed, list):
                fail(task.choices_field, 'must be a list of strings, e.g. ["yes", "no"] (the choices of this item)')
            choices = listed
            _check_choice_list(choices, lambda problem: fail(task.choices_field, problem))
        fields = {k: v for k, v in values.items() if isinstance(v, str)}
        for name, user in self.needs.items():
            if name not in values:
                fail(name, f"missing field used by the {user}" + (" template" if user != "metric" else ""))
        context: dict[str, Any] = dict(values)
        item = Item(id=item_id, fields=fields, line=row.line, choices=choices)
        for style in STYLES:
            item.prompts[style] = self._render("prompt", style, context, fail)
            item.targets[style] = self._render("target", style, context, fail)
            if not item.prompts[style].strip():
                fail(None, f"the prompt renders to an empty text ({style} style)")
            if task.type == "multiple_choice" and item.targets[style] not in task.choices_for(item):
                fail(None, f"target {item.targets[style]!r} is not one of the choices "
                     f"{task.choices_for(item)!r} ({style} style)")
            problem = self.metric.check_target(item.targets[style], self.metric_args)
            if problem:
                fail(None, f"{problem} ({style} style; metric {task.metric})")
        return item

    def _render(self, key: str, style: str, context: dict[str, Any], fail: Any) -> str:
        try:
            return templates.render(self.compiled[key][style], context)
        except Exception as e:  # any template runtime error is a data problem of this row
            fail(None, f"cannot render the {key} template ({style} style): {type(e).__name__}: {e}")
            raise  # unreachable: fail raises


def _row_fail(path: Path, line: int, field: str | None, problem: str) -> NoReturn:
    raise EvalsetError(str(path), line, field, problem)
