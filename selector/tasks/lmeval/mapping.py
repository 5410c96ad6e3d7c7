"""lm-eval task keys -> selector task keys, row by row where lm-eval's meaning depends on the data."""

from __future__ import annotations

import ast
import re
from typing import Any

from selector.tasks.lmeval import source as li

_STRIP = [r"^\s+", r"\s+$"]  # how an export writes selector's strip=True for lm-eval's exact_match
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]")


def build_spec(src: li.Source, splits: dict[str, list[dict[str, Any]]]) -> li.ImportedTask:
    name = _NAME_CHARS.sub("_", str(src.get("task") or src.path.stem)).lstrip("_.-") or "task"
    eval_split = src.get("test_split") or src.get("validation_split")
    if eval_split not in splits:
        src.fail("test_split", f"the split to score ({eval_split!r}) is not among data_files splits {sorted(splits)}")
    rows = [dict(r) for r in splits[eval_split]]
    notes: list[str] = []
    fewshot = _fewshot_rows(src, splits, eval_split, notes)
    columns = {k for r in rows + fewshot for k in r}
    mc = _output_type(src) == "multiple_choice"
    spec: dict[str, Any] = {"name": name, "description": f"imported from lm-eval task {src.get('task')!r}",
                            "type": "multiple_choice" if mc else "generate", "data": f"{name}.jsonl"}
    spec["id_field"] = _ids(rows)
    spec["prompt"] = li.field_or_template(src.get("doc_to_text"), columns, src, "doc_to_text")
    spec["target"] = _target(src, rows + fewshot, columns, mc, spec)
    # lm-eval's prompts are completions unless run with --apply_chat_template; a selector export says which.
    chat = ((src.get("metadata") or {}).get("selector") or {}).get("style") == "chat"
    spec["prompt_style"] = "chat" if chat else "plain"
    if src.get("description"):
        spec["system"] = str(src.get("description"))
        if not chat:
            notes.append("description became `system`, which only chat-style prompts show")
    spec["target_delimiter"] = str(src.get("target_delimiter", " "))
    spec["fewshot_delimiter"] = str(src.get("fewshot_delimiter", "\n\n"))
    if fewshot:
        spec["fewshot"] = {"n": len(fewshot), "data": f"{name}_fewshot.jsonl"}
    if not mc:
        gen = src.get("generation_kwargs")
        gen = {"until": [spec["fewshot_delimiter"]]} if gen is None else gen  # lm-eval's default stop
        until = gen.get("until") or []
        spec["stop"] = [until] if isinstance(until, str) else [str(u) for u in until]
        spec["max_new_tokens"] = int(gen.get("max_gen_toks", li.LMEVAL_MAX_GEN_TOKS))
        if gen.get("do_sample") or float(gen.get("temperature", 0) or 0) > 0:
            notes.append("lm-eval samples here (do_sample/temperature); selector decodes greedily")
    spec.update(_metric(src, mc, notes))
    if src.get("filter_list"):
        notes.append("filter_list is not applied: selector scores the whole output (the numeric metric "
                     "reads the last number, contains looks for the answer anywhere)")
    return li.ImportedTask(name=name, spec=spec, rows=rows, fewshot_rows=fewshot, notes=notes)


def _output_type(src: li.Source) -> str:
    kind = src.get("output_type", "generate_until")
    if kind not in ("generate_until", "multiple_choice"):
        src.fail("output_type", f"{kind!r} cannot be imported: selector scores generate_until and multiple_choice")
    return kind


def _fewshot_rows(src: li.Source, splits: dict[str, list[dict[str, Any]]], eval_split: str,
                  notes: list[str]) -> list[dict[str, Any]]:
    n = int(src.get("num_fewshot") or 0)
    if n <= 0:
        return []
    cfg = src.get("fewshot_config") or {}
    split = src.get("fewshot_split") or cfg.get("split") or src.get("training_split")
    if split is None and cfg.get("samples"):
        pool = [li.strings(src.path, None, r) for r in cfg["samples"]]
    else:
        if split is None and src.get("validation_split") not in (None, eval_split):
            split = src.get("validation_split")
        if split is None or split == eval_split:
            src.fail("num_fewshot", "few-shot examples must come from another split than the scored one "
                     "(set fewshot_split to a split of data_files)")
        if split not in splits:
            src.fail("fewshot_split", f"split {split!r} is not among data_files splits {sorted(splits)}")
        pool = splits[split]
    if len(pool) < n:
        src.fail("num_fewshot", f"{n} examples asked for, but the few-shot split has {len(pool)}")
    if cfg.get("sampler", "default") != "first_n":
        notes.append(f"lm-eval draws the {n} few-shot examples at random per item; selector shows the first {n} "
                     "of the split to every item (fewshot_config: {sampler: first_n} does the same in lm-eval)")
    return [dict(r) for r in pool[:n]]


def _ids(rows: list[dict[str, Any]]) -> str:
    ids = [r.get("id") for r in rows]
    if all(isinstance(i, str) and i.strip() for i in ids) and len(set(ids)) == len(ids):
        return "id"
    for number, row in enumerate(rows):
        row["_id"] = str(number)  # lm-eval's doc_id: the row's position in the split
    return "_id"


def _choices(src: li.Source, rows: list[dict[str, Any]], columns: set[str], spec: dict[str, Any]) -> list[list[str]]:
    """Each row's choices, and the spec keys that give them to selector."""
    given = src.get("doc_to_choice")
    if isinstance(given, dict):
        given = list(given.values())
    if isinstance(given, list):
        spec["choices"] = [str(c) for c in given]
        return [spec["choices"]] * len(rows)
    if not isinstance(given, str) or isinstance(given, li.FunctionRef):
        src.fail("doc_to_choice", "a multiple_choice task needs doc_to_choice: a list, a column or a Jinja template")
    if given in columns:
        spec["choices_field"] = given
        return [r[given] for r in rows]
    for row in rows:  # a template that renders a list literal: store each row's list
        row["_choices"] = li.literal_list(src, li.render(given, row), "doc_to_choice")
    spec["choices_field"] = "_choices"
    return [r["_choices"] for r in rows]


def _target(src: li.Source, rows: list[dict[str, Any]], columns: set[str], mc: bool, spec: dict[str, Any]) -> str:
    given = src.get("doc_to_target")
    uses_choices = mc or src.get("doc_to_choice") is not None
    if isinstance(given, int) and not isinstance(given, bool) and uses_choices:
        template = None
    else:
        template = li.field_or_template(given, columns, src, "doc_to_target")
    choices = _choices(src, rows, columns, spec) if uses_choices else [[] for _ in rows]
    if not mc:
        spec.pop("choices", None), spec.pop("choices_field", None)
    golds = []
    for row, options in zip(rows, choices):
        value = given if template is None else (row[given] if given in columns else li.render(template, row))
        from_column = template is not None and given in columns
        golds.append(_gold(src, value, options, from_column=from_column, uses_choices=uses_choices))
    if template is not None and all(g == li.render(template, r) for g, r in zip(golds, rows)):
        return template
    for row, gold in zip(rows, golds):  # lm-eval's answer is an index (or computed): store the text
        row["_target"] = gold
    return "{{ _target }}"


def _gold(src: li.Source, value: Any, choices: list[str], from_column: bool, uses_choices: bool) -> str:
    """The answer text lm-eval scores against: an index into the choices becomes that choice."""
    if isinstance(value, int):
        index = value
    elif isinstance(value, str) and value.isdigit() and uses_choices and not (from_column and value in choices):
        index = int(value)  # lm-eval reads a rendered digit string as an index (a column value only if numeric)
    else:
        text = str(value)
        if len(text) >= 2 and text[0] == "[" and text[-1] == "]":
            try:
                if isinstance(ast.literal_eval(text), list):
                    src.fail("doc_to_target", f"renders to a list {text[:60]!r}: several gold answers per item "
                             "cannot be imported (selector scores against one)")
            except (ValueError, SyntaxError):
                pass
        return text
    if not 0 <= index < len(choices):
        src.fail("doc_to_target", f"answer index {index} is outside the {len(choices)} choices {choices!r}")
    return choices[index]


def _metric(src: li.Source, mc: bool, notes: list[str]) -> dict[str, Any]:
    listed = src.get("metric_list") or [{"metric": "acc" if mc else "exact_match"}]
    first = listed[0] if isinstance(listed[0], dict) else {"metric": listed[0]}
    name = str(first.get("metric"))
    if len(listed) > 1:
        notes.append(f"metric_list names {len(listed)} metrics; selector scores with the first, {name}")
    if li.selector_utils(src, src.get("process_results"), "process_results") and name in li.SELECTOR_SCORED:
        module = src.path.parent / (str(src.get("process_results")).rsplit(".", 1)[0] + ".py")
        found = re.search(r"^METRIC_ARGS = (.*)$", module.read_text(), re.M)
        return {"metric": name, "metric_args": ast.literal_eval(found.group(1)) if found else {}}
    if mc:
        if name not in ("acc", "acc_norm"):
            src.fail("metric_list", f"{name!r}: a multiple_choice task imports with acc or acc_norm")
        return {"metric": "choice_accuracy", "metric_args": {"normalize": "chars" if name == "acc_norm" else "none"}}
    if name != "exact_match":
        src.fail("metric_list", f"{name!r} has no selector equivalent (selector scores exact_match, contains, numeric, "
                 "f1, code_tests; lm-eval metrics outside its own registry are loaded from the Hub by `evaluate`)")
    regexes = list(first.get("regexes_to_ignore") or [])
    args = {"ignore_case": bool(first.get("ignore_case", False)), "strip": regexes == _STRIP}
    if regexes and regexes != _STRIP:
        notes.append(f"regexes_to_ignore {regexes!r} is not applied")
    if first.get("ignore_punctuation"):
        args["strip_punctuation"] = True
        notes.append("ignore_punctuation: lm-eval removes all punctuation, selector strips it from both ends")
    if first.get("ignore_numbers"):
        notes.append("ignore_numbers is not applied")
    return {"metric": "exact_match", "metric_args": args}
