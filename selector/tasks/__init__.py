"""Eval sets as data: task YAML + rows (JSONL, CSV, Parquet), Jinja prompts, metrics, evaluation.

See docs/evalset-format.md for the file format.
"""

from selector.tasks.evaluate import evaluate_task
from selector.tasks.loader import evalset_hash, load_evalset
from selector.tasks.task import Item, Task
from selector.tasks.metrics import METRICS, Metric, Scored, ScoreInput, get_metric
from selector.tasks.prompts import build_prompt, build_requests, continuation, resolve_style

__all__ = [
    "METRICS",
    "Item",
    "Metric",
    "ScoreInput",
    "Scored",
    "Task",
    "build_prompt",
    "build_requests",
    "continuation",
    "evalset_hash",
    "evaluate_task",
    "get_metric",
    "load_evalset",
    "resolve_style",
]
