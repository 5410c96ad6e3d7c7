"""A task and its items, as loaded: the spec fields plus every row rendered in both styles."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


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
