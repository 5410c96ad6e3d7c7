"""Jinja2 templates for prompts and targets.

Sandboxed (a task file cannot reach Python internals), StrictUndefined (a missing field is an
error, not an empty string), autoescape off (prompts are text, not HTML) and trailing newlines
kept (a prompt is exactly what the template says). Field values are passed in as data and are
never parsed as templates, so a row holding "{{ x }}" renders those characters literally.
"""

from __future__ import annotations

from typing import Any

from jinja2 import StrictUndefined, Template, meta
from jinja2.sandbox import SandboxedEnvironment

ENV = SandboxedEnvironment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)


def compile_template(source: str) -> Template:
    """Compile once per task; raises jinja2.TemplateSyntaxError."""
    return ENV.from_string(source)


def variables(source: str) -> set[str]:
    """Names a template reads from its context (the row fields it needs)."""
    return set(meta.find_undeclared_variables(ENV.parse(source))) - set(ENV.globals)


def render(template: Template, context: dict[str, Any]) -> str:
    return template.render(context)
