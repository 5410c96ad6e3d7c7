"""Helpers that travel with a task exported for lm-evaluation-harness (copied as `<task>_utils.py`).

This file must stand alone: it runs inside lm-eval's environment, where selector is not installed
(only the standard library, jinja2 and datasets, which lm-eval depends on). It does two jobs:

- `load_jsonl`: the task's `custom_dataset`. It reads the JSONL beside this file with every value a
  string exactly as written. lm-eval's own `dataset_path: json` goes through the `datasets` JSON
  reader, which turns date-like strings into timestamps, and resolves relative `data_files`
  against the working directory instead of the task folder.
- `process_results`: scores an output the way selector's metric of the same name does, for
  metrics lm-eval has no exact equivalent of (numeric, contains, f1, exact_match with
  strip_punctuation or first_line). The exporter appends this task's constants below.

selector's unit tests import this module and check it scores like selector.tasks.metrics.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# Set per task by the exporter (appended at the end of the copied file).
TARGET_TEMPLATE: str = ""
METRIC: str = ""
METRIC_ARGS: dict[str, Any] = {}


def load_jsonl(data_files: dict[str, str], **_: Any) -> Any:
    """lm-eval `custom_dataset`: a DatasetDict with one split per JSONL file, values as strings."""
    import datasets

    splits = {}
    for split, name in data_files.items():
        lines = (HERE / name).read_text(encoding="utf-8").splitlines()
        rows = [json.loads(line) for line in lines if line.strip()]
        splits[split] = datasets.Dataset.from_list(rows)
    return datasets.DatasetDict(splits)


# ---- selector's metrics, restated (selector/tasks/metrics.py is the reference) ----


def _strip_punctuation(text: str) -> str:
    start, end = 0, len(text)
    while start < end and (text[start].isspace() or unicodedata.category(text[start]).startswith("P")):
        start += 1
    while end > start and (text[end - 1].isspace() or unicodedata.category(text[end - 1]).startswith("P")):
        end -= 1
    return text[start:end]


def normalize(text: str, ignore_case: bool = False, strip: bool = True, strip_punctuation: bool = False,
              first_line: bool = False) -> str:
    if first_line:
        lines = [line for line in text.splitlines() if line.strip()]
        text = lines[0] if lines else ""
    if strip:
        text = text.strip()
    if strip_punctuation:
        text = _strip_punctuation(text)
    if ignore_case:
        text = text.casefold()
    return text


_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>[-+\u2212]?)[$\u20ac\u00a3\u00a5]?(?P<int>\d{1,3}(?:,\d{3})+(?!\d)|\d+)?(?P<frac>\.\d+)?"
)


def numbers(text: str) -> list[float]:
    found = []
    for m in _NUMBER.finditer(text):
        if not (m.group("int") or m.group("frac")):
            continue
        value = float((m.group("int") or "0").replace(",", "") + (m.group("frac") or ""))
        found.append(-value if m.group("sign") in ("-", "\u2212") else value)
    return found


def score(metric: str, output: str, target: str, args: dict[str, Any]) -> float:
    if metric == "exact_match":
        return float(normalize(output, **args) == normalize(target, **args))
    if metric == "contains":
        return float(normalize(target, **args) in normalize(output, **args))
    if metric == "numeric":
        found, gold = numbers(output), numbers(target)
        if not found or len(gold) != 1:
            return 0.0
        value = found[-1] if args.get("which", "last") == "last" else found[0]
        return float(math.isclose(value, gold[0], rel_tol=args.get("rel_tol", 0.0), abs_tol=args.get("abs_tol", 1e-6)))
    if metric == "f1":
        fold = args.get("ignore_case", True)
        pred = re.findall(r"\w+", output.casefold() if fold else output)
        gold_tokens = re.findall(r"\w+", target.casefold() if fold else target)
        if not pred or not gold_tokens:
            return float(pred == gold_tokens)
        common = sum((Counter(pred) & Counter(gold_tokens)).values())
        if common == 0:
            return 0.0
        precision, recall = common / len(pred), common / len(gold_tokens)
        return 2 * precision * recall / (precision + recall)
    raise ValueError(f"unknown metric {metric!r}")


def render_target(doc: dict[str, Any]) -> str:
    import jinja2

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    return env.from_string(TARGET_TEMPLATE).render(**doc)


def process_results(doc: dict[str, Any], results: list[str]) -> dict[str, float]:
    """lm-eval `process_results` for a generate task: {metric name: score of this item}."""
    return {METRIC: score(METRIC, results[0], render_target(doc), METRIC_ARGS)}
