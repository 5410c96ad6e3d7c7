"""lm-evaluation-harness task YAML: export selector's tasks to it, import a user's tasks from it.

Export writes, per task, `<name>.yaml` (plain Jinja doc_to_text / doc_to_target, as selector
renders them), the rows as JSONL with every value a string, and `<name>_utils.py`, whose
`load_jsonl` is the task's `custom_dataset`: lm-eval's own `dataset_path: json` would turn
date-like strings into timestamps and would look for relative data files in the working directory.
Where lm-eval has a metric that scores like selector's (exact_match, acc, acc_norm) the YAML names
it; otherwise `process_results` in the same file scores as selector does. See docs/lm-eval.md.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import yaml

from selector.errors import EvalsetError
from selector.tasks.lmeval import scoring as lmeval_scoring
from selector.tasks.loader import load_evalset
from selector.tasks.spec import STYLES
from selector.tasks.task import Item, Task

log = logging.getLogger("selector.lmeval")

PREFIX = "selector_"  # lm-eval ships tasks named "arithmetic" and more: keep exported names apart
INDEX_FIELD = "_target_index"  # multiple choice with digit-like answers: lm-eval would read "3" as an index
NOT_EXPORTABLE = {"code_tests": "it runs generated code in selector's sandbox; lm-eval has no equivalent"}


class _Function(str):
    """A YAML scalar written with lm-eval's `!function` tag."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Function, lambda d, v: d.represent_scalar("!function", str(v)))


def _str_style(text: str) -> str | None:
    """Multi-line templates as literal blocks; delimiters made of newlines double-quoted, so they show."""
    if "\n" in text and text.strip() and not any(line != line.rstrip() for line in text.split("\n")):
        return "|"
    return '"' if "\n" in text or "\t" in text else None


_Dumper.add_representer(str, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v, style=_str_style(v)))


def dump_yaml(data: dict[str, Any]) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)


def _template(source: str, fields: set[str]) -> str:
    # lm-eval reads a doc_to_* string that equals a column name as that column, not as text.
    return "{{ " + json.dumps(source) + " }}" if source in fields else source


def _rows(task: Task, items: list[Item], index: bool, style: str) -> list[dict[str, Any]]:
    keys = sorted({k for item in items for k in item.fields})
    rows = []
    for item in items:
        row: dict[str, Any] = {k: item.fields.get(k) for k in keys}
        if task.choices_field:
            row[task.choices_field] = task.choices_for(item)
        if index:
            row[INDEX_FIELD] = str(task.choices_for(item).index(item.targets[style]))
        rows.append(row)
    return rows


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def _metric(task: Task, target: str, utils: str) -> tuple[dict[str, Any], str | None]:
    """(YAML keys that score the task, per-task constants for <task>_utils.py or None)."""
    args = task.metric_args
    if task.type == "multiple_choice":
        if args.get("normalize") == "tokens":
            log.warning("%s: lm-eval has no per-token normalisation; exported with acc (unnormalised)", task.name)
        name = "acc_norm" if args.get("normalize") == "chars" else "acc"
        return {"metric_list": [{"metric": name, "aggregation": "mean", "higher_is_better": True}]}, None
    if task.metric == "exact_match" and not args["strip_punctuation"] and not args["first_line"]:
        metric = {"metric": "exact_match", "aggregation": "mean", "higher_is_better": True,
                  "ignore_case": bool(args["ignore_case"]), "ignore_punctuation": False}
        if args["strip"]:
            metric["regexes_to_ignore"] = [r"^\s+", r"\s+$"]
        return {"metric_list": [metric]}, None
    constants = (f"\n\n# ---- this task: {task.name} (written by selector) ----\n"
                 f"TARGET_TEMPLATE = {target!r}\nMETRIC = {task.metric!r}\nMETRIC_ARGS = {dict(args)!r}\n")
    keys = {"process_results": _Function(f"{utils}.process_results"),
            "metric_list": [{"metric": task.metric, "aggregation": "mean", "higher_is_better": True}]}
    return keys, constants


def export_task(task: Task, out_dir: str | Path, style: str = "plain", prefix: str = PREFIX) -> Path:
    """Write `task` as an lm-eval task into out_dir; returns the YAML's path.

    style: which of the task's templates to use. plain matches lm-eval's default completion
    prompts; chat is meant for `lm_eval --apply_chat_template --fewshot_as_multiturn`."""
    if style not in STYLES:
        raise EvalsetError(str(task.source), None, "style", f"must be one of {', '.join(STYLES)}, got {style!r}")
    if task.metric in NOT_EXPORTABLE:
        raise EvalsetError(str(task.source), None, "metric",
                           f"{task.metric} cannot be exported to lm-eval: {NOT_EXPORTABLE[task.metric]}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_]", "_", prefix + task.name)
    utils = f"{name}_utils"
    fields = {k for item in task.items + task.fewshot for k in item.fields}
    index = task.type == "multiple_choice" and any(item.targets[style].isdigit() for item in task.items + task.fewshot)
    data_files = {"test": f"{name}.jsonl"}
    _write_jsonl(out / data_files["test"], _rows(task, task.items, index, style))
    if task.fewshot:
        data_files["train"] = f"{name}_fewshot.jsonl"
        _write_jsonl(out / data_files["train"], _rows(task, task.fewshot, index, style))

    target = _template(task.target[style], fields)
    config: dict[str, Any] = {
        "task": name,
        "custom_dataset": _Function(f"{utils}.load_jsonl"),
        "dataset_kwargs": {"data_files": data_files},
        "test_split": "test",
        "output_type": "generate_until" if task.type == "generate" else "multiple_choice",
        "doc_to_text": _template(task.prompt[style], fields),
        "doc_to_target": "{{ " + INDEX_FIELD + " }}" if index else target,
    }
    if task.type == "multiple_choice":
        config["doc_to_choice"] = task.choices_field or list(task.choices or [])
    else:
        config["generation_kwargs"] = {"until": list(task.stop[style]), "max_gen_toks": task.max_new_tokens,
                                       "do_sample": False, "temperature": 0.0}
    if style == "chat" and task.system:
        config["description"] = task.system
    config["target_delimiter"] = task.target_delimiter
    config["fewshot_delimiter"] = task.fewshot_delimiter
    if task.fewshot:  # selector shows the first n examples, in file order
        config.update({"fewshot_split": "train", "num_fewshot": len(task.fewshot), "fewshot_config": {"sampler": "first_n"}})
    else:
        config["num_fewshot"] = 0
    metric_keys, constants = _metric(task, target, utils)
    config.update(metric_keys)
    config["metadata"] = {"version": 1.0, "selector": {"task": task.name, "style": style, "metric": task.metric}}

    source = Path(lmeval_scoring.__file__).read_text(encoding="utf-8")
    (out / f"{utils}.py").write_text(source + (constants or ""), encoding="utf-8")
    path = out / f"{name}.yaml"
    header = (f"# Exported by selector from {task.source.name} ({style} prompts). Run it with:\n"
              f"#   lm_eval --model hf --model_args pretrained=MODEL --include_path {out.name} --tasks {name}\n")
    path.write_text(header + dump_yaml(config), encoding="utf-8")
    return path


def export_evalset(path: str | Path, out_dir: str | Path, style: str = "plain", prefix: str = PREFIX,
                   tasks: list[str] | None = None) -> list[Path]:
    """Export every task of an eval set folder (those lm-eval cannot score are skipped with a
    warning), plus a group `<prefix><evalset>` that runs them all; returns the task YAML paths."""
    folder = Path(path)
    written = []
    for task in load_evalset(folder, tasks):
        if task.metric in NOT_EXPORTABLE:
            log.warning("%s: not exported (%s cannot be: %s)", task.name, task.metric, NOT_EXPORTABLE[task.metric])
            continue
        written.append(export_task(task, out_dir, style, prefix))
    if written:
        group = re.sub(r"[^A-Za-z0-9_]", "_", prefix + folder.resolve().name)
        members = [p.stem for p in written]  # each YAML is named after its task
        (Path(out_dir) / f"{group}.yaml").write_text(dump_yaml({"group": group, "task": members}), encoding="utf-8")
    return written



