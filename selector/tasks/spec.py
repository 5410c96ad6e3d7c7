"""One task YAML file, its keys validated one by one: every error names the file, the key's
line and the key."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, NoReturn

import yaml
from jinja2 import Template, TemplateSyntaxError

from selector.yaml_lines import yaml_line
from selector.errors import EvalsetError
from selector.tasks import templates
from selector.tasks.data import SUFFIXES
from selector.tasks.hf_datasets import is_dataset_folder

STYLES = ("chat", "plain")
TYPES = ("generate", "multiple_choice")
PROMPT_STYLES = ("model", *STYLES)
KEYS = (
    "name", "description", "type", "data", "id_field", "prompt", "target", "choices", "choices_field",
    "system", "fewshot", "prompt_style", "prompt_style_overrides", "target_delimiter", "fewshot_delimiter",
    "stop", "max_new_tokens", "metric", "metric_args",
)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class Spec:
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
            self.fail(key, f"must be a string{quote_hint(value)}, got {kind(value)}")
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
                    self.fail(key, f"{style} must be a string{quote_hint(got)}, got {kind(got)}", style)
            return dict(value)
        self.fail(key, f"must be a string or a mapping {{chat: ..., plain: ...}}, got {kind(value)}")

    def string_list(self, key: str, value: Any, sub: str | None = None) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            bad = next((v for v in value if not isinstance(v, str)), None) if isinstance(value, list) else value
            self.fail(key, f"must be a list of strings{quote_hint(bad)}", sub)
        return list(value)

    def integer(self, key: str, value: Any, minimum: int, sub: str | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.fail(key, f"must be an integer >= {minimum}, got {value!r}", sub)
        return value

    @property
    def name(self) -> str:
        return self.raw["name"]


def kind(value: Any) -> str:
    return {bool: "a boolean", int: "a number", float: "a number", type(None): "null", list: "a list",
            dict: "a mapping"}.get(type(value), type(value).__name__)


def quote_hint(value: Any) -> str:
    # YAML 1.1 reads yes/no/on/off as booleans and 1.0 as a number: quoting keeps them text.
    return f" (quote it: YAML read {value!r} as {kind(value)})" if isinstance(value, (bool, int, float)) else ""


def read_spec(path: Path) -> Spec:
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
        raise EvalsetError(str(path), 1, None, f"a task file must be a YAML mapping, got {kind(raw)}")
    assert isinstance(node, yaml.MappingNode)
    seen: set[Any] = set()
    for key_node, _ in node.value:  # PyYAML keeps the last of duplicate keys silently
        if key_node.value in seen:
            raise EvalsetError(str(path), key_node.start_mark.line + 1, str(key_node.value), "key appears twice")
        seen.add(key_node.value)
    spec = Spec(path, raw)
    for key in raw:
        if key not in KEYS:
            close = difflib.get_close_matches(str(key), KEYS, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            spec.fail(str(key), f"unknown key.{hint} Known keys: {', '.join(KEYS)}")
    raw["name"] = spec.string("name", default=path.stem)
    if not _NAME.match(raw["name"]):
        spec.fail("name", f"{raw['name']!r} must be letters, digits, '_', '-' or '.' (it names files and metrics)")
    return spec


def choices(spec: Spec, task_type: str) -> tuple[list[str] | None, str | None]:
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
    check_choice_list(choices, lambda problem: spec.fail("choices", problem))
    return choices, None


def check_choice_list(choices: list[str], fail: Any) -> None:
    if len(choices) < 2:
        fail(f"needs at least 2 choices, got {len(choices)}")
    if len(set(choices)) != len(choices):
        fail("choices must be distinct")
    if any(not c for c in choices):
        fail("a choice is empty")


def overrides(spec: Spec) -> dict[str, str]:
    value = spec.raw.get("prompt_style_overrides") or {}
    if not isinstance(value, dict):
        spec.fail("prompt_style_overrides", f"must be a mapping of model name -> chat|plain, got {kind(value)}")
    for model, style in value.items():
        if not isinstance(model, str) or style not in STYLES:
            spec.fail("prompt_style_overrides", f"{model!r}: must map a model name to chat or plain, got {style!r}",
                      str(model))
    return dict(value)


def stops(spec: Spec) -> dict[str, list[str]]:
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


def compile_template(spec: Spec, key: str, source: str, style: str) -> Template:
    try:
        return templates.compile_template(source)
    except TemplateSyntaxError as e:
        sub = style if isinstance(spec.raw.get(key), dict) else None
        spec.fail(key, f"template error ({style} style, template line {e.lineno}): {e.message}", sub)


def data_path(spec: Spec, key: str, relative: str, sub: str | None = None) -> Path:
    path = spec.path.parent / relative
    if is_dataset_folder(path):  # written by datasets' save_to_disk
        return path
    if path.suffix.lower() not in SUFFIXES:
        spec.fail(key, f"data file {relative!r} must end in one of {', '.join(SUFFIXES)} "
                  "or be a folder written by datasets' save_to_disk", sub)
    if not path.is_file():
        spec.fail(key, f"data file not found: {path}", sub)
    return path


