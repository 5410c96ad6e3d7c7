"""Rows become Items: each row's prompt and target are rendered in both styles at load time, so a
template or data problem surfaces before any model loads, with the row's file and line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from jinja2 import Template

from selector.errors import EvalsetError
from selector.tasks import templates
from selector.tasks.data import Row
from selector.tasks.metrics import Metric
from selector.tasks.spec import STYLES, check_choice_list
from selector.tasks.task import Item, Task


def unique_ids(path: Path, task: Task) -> None:
    first_line: dict[str, int] = {}
    for item in task.items:
        if item.id in first_line:
            raise EvalsetError(str(path), item.line, task.id_field,
                               f"duplicate id {item.id!r} (first on line {first_line[item.id]})")
        first_line[item.id] = item.line


def no_leak(path: Path, task: Task) -> None:
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
class Renderer:
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
            check_choice_list(choices, lambda problem: fail(task.choices_field, problem))
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
