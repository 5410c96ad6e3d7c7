"""Prompts and engine requests for a task, in chat or plain (few-shot completion) style.

Chat: [system] + (user: example prompt, assistant: example target) per few-shot example + user:
item prompt; the engine applies the model's chat template. Plain (for base models, lm-eval's
convention): examples as prompt + target_delimiter + target, joined by fewshot_delimiter, then the
item's prompt; a multiple-choice continuation is target_delimiter + choice.
"""

from __future__ import annotations

from selector.generation import GenerationRequest, LoglikelihoodRequest, Prompt
from selector.errors import ConfigError
from selector.tasks.spec import STYLES
from selector.tasks.task import Item, Task


def resolve_style(task: Task, model_name: str, model_prompt_style: str) -> str:
    """chat or plain: the task's per-model override, else the task's own style, else the model's."""
    if model_name in task.prompt_style_overrides:
        return task.prompt_style_overrides[model_name]
    if task.prompt_style != "model":
        return task.prompt_style
    if model_prompt_style not in STYLES:
        raise ConfigError(f"model {model_name}", "prompt_style", f"must be chat or plain, got {model_prompt_style!r}")
    return model_prompt_style


def build_prompt(task: Task, item: Item, style: str) -> Prompt:
    if style == "chat":
        messages = [{"role": "system", "content": task.system}] if task.system else []
        for example in task.fewshot:
            messages.append({"role": "user", "content": example.prompts["chat"]})
            messages.append({"role": "assistant", "content": example.targets["chat"]})
        messages.append({"role": "user", "content": item.prompts["chat"]})
        return messages
    shots = [ex.prompts["plain"] + task.target_delimiter + ex.targets["plain"] for ex in task.fewshot]
    return task.fewshot_delimiter.join([*shots, item.prompts["plain"]])


def continuation(task: Task, choice: str, style: str) -> str:
    return task.target_delimiter + choice if style == "plain" else choice


def build_requests(
    task: Task, model_name: str, model_prompt_style: str
) -> list[GenerationRequest] | list[list[LoglikelihoodRequest]]:
    """One GenerationRequest per item, or per item one LoglikelihoodRequest per choice."""
    style = resolve_style(task, model_name, model_prompt_style)
    if task.type == "generate":
        return [
            GenerationRequest(build_prompt(task, item, style), task.max_new_tokens, list(task.stop[style]))
            for item in task.items
        ]
    groups = []
    for item in task.items:
        context = build_prompt(task, item, style)
        groups.append([LoglikelihoodRequest(context, continuation(task, c, style)) for c in task.choices_for(item)])
    return groups
