"""Run one task through an engine and score it: a TaskResult with its interval, and one
SampleRecord per item (what the model saw, said, and how it scored)."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable
from typing import Any

from selector.generation import Evaluator, GenerationRequest, LoglikelihoodRequest, Progress
from selector.stats import mean_interval
from selector.tasks.task import Task
from selector.tasks.metrics import InvalidScoreError, ScoreInput, check_score, get_metric, pick_choice
from selector.tasks.prompts import build_requests, resolve_style
from selector.records import SampleRecord, TaskResult


def evaluate_task(
    engine: Evaluator,
    task: Task,
    model_name: str,
    model_prompt_style: str,
    confidence: float = 0.95,
    on_sample: Callable[[SampleRecord], None] | None = None,
    progress: Progress | None = None,
    ci_method: str = "exact",
) -> tuple[TaskResult, list[SampleRecord]]:
    """Score every item of `task`. The whole task goes to the engine in one call, so it batches;
    `progress` is called with the number of items just finished."""
    style = resolve_style(task, model_name, model_prompt_style)
    metric = get_metric(task.metric)
    requests = build_requests(task, model_name, model_prompt_style)
    if task.type == "generate":
        outputs, prompts, extras = _generate(engine, requests, progress)  # type: ignore[arg-type]
    else:
        outputs, prompts, extras = _choose(engine, task, requests, progress)  # type: ignore[arg-type]

    inputs = [
        ScoreInput(output=out, target=item.targets[style], fields=item.fields, prompt=item.prompts[style], style=style)
        for out, item in zip(outputs, task.items)
    ]
    scored = metric.score_batch(inputs, task.metric_args)
    records = []
    for item, prompt, out, extra, score in zip(task.items, prompts, outputs, extras, scored):
        try:
            value = check_score(score.value, task.name, item.id, task.metric)
        except InvalidScoreError as e:
            raise InvalidScoreError(e.task, e.item, e.metric, e.value, kept=records) from None
        record = SampleRecord(
            task=task.name,
            id=item.id,
            prompt=engine.render(prompt),
            output=out,
            target=item.targets[style],
            score=value,
            extra={"style": style, **extra, **score.detail},
        )
        records.append(record)
        if on_sample is not None:
            on_sample(record)

    return summarize(task, {r.id: r.score for r in records}, confidence, ci_method), records


def summarize(task: Task, item_scores: dict[str, float], confidence: float = 0.95,
              ci_method: str = "exact") -> TaskResult:
    """A task's result over the items scored so far (all of them, or the prefix an adaptive search
    evaluated): the mean with the interval the selection uses too (selector.stats.mean_interval:
    Clopper-Pearson by default, Wilson or the bootstrap when ci_method says so)."""
    metric = get_metric(task.metric)
    values = list(item_scores.values())
    n = len(values)
    if n == 0:
        raise ValueError(f"task {task.name}: no scored items to summarize")
    low, high, method = mean_interval(values, metric.binary, confidence, ci_method)
    return TaskResult(task=task.name, metric=task.metric, value=sum(values) / n, ci_low=low, ci_high=high, n=n,
                      higher_is_better=metric.higher_is_better, ci_method=method, item_scores=dict(item_scores))


def _generate(
    engine: Evaluator, requests: list[GenerationRequest], progress: Progress | None
) -> tuple[list[str], list[Any], list[dict[str, Any]]]:
    generations = engine.generate(requests, progress=progress)
    if len(generations) != len(requests):
        raise RuntimeError(f"engine {engine.name} returned {len(generations)} generations for {len(requests)} requests")
    extras = [{"prompt_tokens": g.prompt_tokens, "output_tokens": g.output_tokens} for g in generations]
    return [g.text for g in generations], [r.prompt for r in requests], extras


def _choose(
    engine: Evaluator, task: Task, groups: list[list[LoglikelihoodRequest]], progress: Progress | None
) -> tuple[list[str], list[Any], list[dict[str, Any]]]:
    flat = [r for group in groups for r in group]
    results = engine.loglikelihood(flat, progress=_items_progress(groups, progress))
    if len(results) != len(flat):
        raise RuntimeError(f"engine {engine.name} returned {len(results)} scores for {len(flat)} requests")
    outputs, extras = [], []
    offsets = [0, *itertools.accumulate(len(g) for g in groups)]
    for item, group, start in zip(task.items, groups, offsets):
        scores = results[start : start + len(group)]
        choices = task.choices_for(item)
        best = pick_choice(scores, [r.continuation for r in group], task.metric_args.get("normalize", "none"))
        outputs.append(choices[best])
        extras.append({"logprobs": {c: s.logprob for c, s in zip(choices, scores)},
                       "greedy": {c: s.is_greedy for c, s in zip(choices, scores)}})
    return outputs, [g[0].context for g in groups], extras


def _items_progress(groups: list[list[Any]], progress: Progress | None) -> Progress | None:
    """Turn the engine's per-request progress into per-item progress (an item has one request per choice)."""
    if progress is None:
        return None
    ends = list(itertools.accumulate(len(g) for g in groups))
    done_requests = 0
    done_items = 0

    def update(finished: int) -> None:
        nonlocal done_requests, done_items
        done_requests += finished
        now = bisect.bisect_right(ends, done_requests)
        if now > done_items:
            progress(now - done_items)
            done_items = now

    return update
