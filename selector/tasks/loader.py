"""Load an eval set: a folder of task YAML files, each pointing at its rows.

Everything is checked here, before any model loads: the YAML keys and their types, every row
(rendered through the prompt and target templates), ids, choices and what the metric needs.
Problems raise EvalsetError naming the file, the 1-based line and the field.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from pathlib import Path

from selector.errors import EvalsetError
from selector.paths import find_path
from selector.registry import UnknownNameError
from selector.tasks import templates
from selector.tasks.data import read_rows
from selector.tasks.evalset_policy import POLICY_FILE
from selector.tasks.items import Renderer, no_leak, unique_ids
from selector.tasks.metrics import MetricArgError, get_metric
from selector.tasks.task import Task
from selector.tasks.spec import (
    PROMPT_STYLES,
    STYLES,
    TYPES,
    Spec,
    choices,
    compile_template,
    data_path,
    kind,
    overrides,
    read_spec,
    stops,
)


# ---- the folder ----

def locate_evalset(path: str | Path) -> Path:
    """A relative path is taken from the working directory; failing that, from the package, so the
    bundled `evalsets/default` is found when selector runs from anywhere (selector.paths)."""
    return find_path(path)


def load_evalset(path: str | Path, tasks: list[str] | None = None, limit: int | None = None) -> list[Task]:
    """The tasks of an eval set folder, sorted by name; `limit` keeps the first N items of each."""
    folder = locate_evalset(path)
    if not folder.is_dir():
        problem = "not a folder" if folder.exists() else "eval set folder not found"
        raise EvalsetError(str(folder), None, None, problem)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise EvalsetError(str(folder), None, "limit", f"must be a positive integer, got {limit!r}")
    files = sorted(p for p in folder.iterdir()
                   if p.is_file() and p.suffix in (".yaml", ".yml") and p.name != POLICY_FILE)
    if not files:
        raise EvalsetError(str(folder), None, None, "no task files (*.yaml) in this folder")
    specs: dict[str, Spec] = {}
    for file in files:
        spec = read_spec(file)
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


def _load_task(spec: Spec) -> Task:
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
        spec.fail("metric_args", f"must be a mapping, got {kind(metric_args_raw)}")
    try:
        metric_args = metric.resolve_args(metric_args_raw)
    except MetricArgError as e:
        spec.fail("metric_args", e.problem, e.arg)

    task_choices, choices_field = choices(spec, task_type)
    task = Task(
        name=spec.name,
        description=spec.string("description", default=""),
        type=task_type,
        data=spec.string("data"),
        id_field=spec.string("id_field", default="id"),
        prompt=spec.per_style("prompt"),
        target=spec.per_style("target"),
        choices=task_choices,
        choices_field=choices_field,
        system=spec.string("system", default=None, nullable=True),
        fewshot_n=0,
        fewshot_data=None,
        prompt_style=spec.string("prompt_style", default="model", allowed=PROMPT_STYLES),
        prompt_style_overrides=overrides(spec),
        target_delimiter=spec.string("target_delimiter", default=" "),
        fewshot_delimiter=spec.string("fewshot_delimiter", default="\n\n"),
        stop=stops(spec),
        max_new_tokens=spec.integer("max_new_tokens", spec.raw.get("max_new_tokens", 32), 1),
        metric=metric_name,
        metric_args=metric_args,
        source=spec.path,
    )
    if not task.id_field:
        spec.fail("id_field", "must not be empty")
    _fewshot_spec(spec, task)

    compiled = {key: {s: compile_template(spec, key, getattr(task, key)[s], s) for s in STYLES} for key in ("prompt", "target")}
    needs = {v: key for key in ("prompt", "target") for s in STYLES for v in templates.variables(getattr(task, key)[s])}
    needs.update({f: "metric" for f in metric.required_fields(metric_args)})
    renderer = Renderer(task, compiled, needs, metric, metric_args)

    rows_path = data_path(spec, "data", task.data)
    rows = read_rows(rows_path, frozenset([choices_field]) if choices_field else frozenset())
    if not rows:
        raise EvalsetError(str(rows_path), None, None, f"task {task.name!r} has no rows")
    task.items = [renderer.item(rows_path, row, require_id=True) for row in rows]
    unique_ids(rows_path, task)
    if task.fewshot_data is not None:
        few_path = data_path(spec, "fewshot", task.fewshot_data, sub="data")
        few_rows = read_rows(few_path, frozenset([choices_field]) if choices_field else frozenset())
        if len(few_rows) < task.fewshot_n:
            spec.fail("fewshot", f"n is {task.fewshot_n} but {few_path.name} has {len(few_rows)} rows", "n")
        task.fewshot = [renderer.item(few_path, row, require_id=False) for row in few_rows[: task.fewshot_n]]
        no_leak(few_path, task)
    return task


def _fewshot_spec(spec: Spec, task: Task) -> None:
    value = spec.raw.get("fewshot")
    if value is None:
        return
    if not isinstance(value, dict):
        spec.fail("fewshot", f"must be a mapping {{n: 3, data: file.jsonl}}, got {kind(value)}")
    unknown = set(value) - {"n", "data"}
    if unknown:
        spec.fail("fewshot", f"unknown key {sorted(map(str, unknown))[0]!r} (fewshot takes n and data)")
    if "data" not in value or not isinstance(value["data"], str):
        spec.fail("fewshot", "data must name a file of examples, relative to the task file", "data")
    task.fewshot_n = spec.integer("fewshot", value.get("n", 0), 0, "n")
    task.fewshot_data = value["data"]
