"""Answers under load: the load test's requests made from eval items are scored, level by level,
and compared with the same variant's answers at rest (its evaluation's samples).

A served model's answers move with the traffic (batching changes the order of floating-point sums;
chunked prefill, preemption and a quantized kernel's batch-size path change what runs together), so
every level (each concurrency, rate, capacity probe and the capacity's confirmation run) gets a
LoadAnswers (selector.records_answers): per task, how many answers differ from the ones at rest, the
accuracy on them with its interval, and a paired test against the answers at rest.

- Which answers are scored: a request made from an eval item (GenerationRequest.item) that
  answered. It was sent with its task's prompt, stop sequences and answer length (traffic's
  load_requests), so its answer differs from the one at rest only through the load. A task whose
  answers are longer than measure.load.new_tokens was sent cut at new_tokens: its answers are
  neither compared nor scored (a difference would be the cut's), and the task says why. Failed or
  cut-off requests have no answer: counted apart (`failed`).
- Cheap, for capacity probes of thousands of requests: an answer identical to the item's answer
  at rest keeps that answer's score (a metric is a function of the text); a changed one is scored
  once per distinct text (cached across the variant's levels). A metric that runs the answer in a
  sandbox (code_tests) gets at most SANDBOX_BUDGET distinct changed answers per variant; past that
  its task is compared only, with the reason in its note, never scored on a biased part.
- Statistics per task, over items (a level cycles the eval set's prompts, so an item can be sent
  several times, and greedy answers to one item are not independent draws): each item's mean score
  under load against its score at rest. Accuracy: the mean over items with the interval the
  evaluation uses (selector.stats.mean_interval, policy.ci_method). Paired test, as the verdict
  compares variants (selector.selection.evidence.paired_diff): 0/1 scores (every item's requests
  agreeing) get Tango's interval of the difference and McNemar's exact test; otherwise a betting
  interval and Wilcoxon's signed-rank test (selector.stats_paired). A level's p_value is the
  smallest of its tasks' after Holm's adjustment over them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from selector.trace import RequestTrace
from selector.records import SampleRecord
from selector.records_answers import ChangedAnswer, LoadAnswers, TaskAnswers

log = logging.getLogger("selector.measure.answers")

EXAMPLES = 3  # changed answers kept per level, one per item
EXAMPLE_CHARS = 200
SANDBOX_BUDGET = 200  # distinct changed answers a sandboxed metric scores per variant (~50 ms each)
RIGHT_AT = 0.5  # a fractional score counts as right in the flip counts (as selection.evidence)


@dataclass
class _Task:
    task: Any  # selector.tasks.Task
    metric: Any  # selector.tasks.Metric
    style: str
    items: dict[str, Any]
    note: str = ""  # not scored, and why ("" : scored)


@dataclass
class _Tally:
    requests: int = 0
    compared: int = 0
    changed: int = 0
    no_rest: int = 0  # answered, but the item has no answer at rest
    unscored: int = 0  # compared, not scored (the sandbox budget ran out)
    scores: dict[str, list[float]] = field(default_factory=dict)  # item id -> its scores under load
    rest: dict[str, float] = field(default_factory=dict)  # item id -> its score at rest


class AnswerScorer:
    """The variant's answers at rest, and what scores a level's answers against them."""

    def __init__(self, tasks: Sequence[Any], at_rest: Iterable[SampleRecord], *, model_name: str, prompt_style: str,
                 new_tokens: int, confidence: float = 0.95, ci_method: str = "exact",
                 sandbox_budget: int = SANDBOX_BUDGET) -> None:
        from selector.tasks import get_metric, resolve_style

        self.rest = {(s.task, s.id): s for s in at_rest}
        self.confidence, self.ci_method = confidence, ci_method
        self.sandbox_budget = self.sandbox_left = sandbox_budget
        self.cache: dict[tuple[str, str, str], float] = {}
        self.tasks: dict[str, _Task] = {}
        for task in tasks:
            if task.type != "generate":
                continue
            note = ""
            if task.max_new_tokens > new_tokens:
                note = (f"not scored: measure.load.new_tokens={new_tokens} is shorter than its answers (max_new_tokens "
                        f"{task.max_new_tokens}), so they were cut under load; measure.load.new_tokens="
                        f"{task.max_new_tokens} scores them")
                log.info("answers under load: %s %s", task.name, note)
            self.tasks[task.name] = _Task(task, get_metric(task.metric), resolve_style(task, model_name, prompt_style),
                                          {item.id: item for item in task.items}, note)

    @classmethod
    def for_variant(cls, tasks: Sequence[Any], cfg: Any, at_rest: Iterable[SampleRecord] | None) -> AnswerScorer | None:
        """The scorer of a variant's load test; None when its requests carry no eval item (a request
        file: said once, here) or there is nothing at rest to compare with."""
        if cfg.measure.load.requests:
            log.info("answers under load: not scored, the load test sends measure.load.requests (%s), whose rows "
                     "are not eval items", cfg.measure.load.requests)
            return None
        if at_rest is None:
            return None
        if not any(t.type == "generate" for t in tasks):
            log.info("answers under load: not scored, the eval set has no generation task (the load test sends the "
                     "multiple-choice contexts, and their evaluation generated no answer to compare with)")
            return None
        return cls(tasks, at_rest, model_name=cfg.model.name, prompt_style=cfg.model.prompt_style,
                   new_tokens=cfg.measure.load.new_tokens, confidence=cfg.policy.confidence,
                   ci_method=cfg.policy.ci_method)

    # ---- one level ------------------------------------------------------------------------------
    def level(self, traces: Sequence[RequestTrace]) -> LoadAnswers | None:
        """The answers of one level's requests made from eval items; None when it sent none."""
        mine = [t for t in traces if t.item is not None and t.item.task in self.tasks]
        if not mine:
            return None
        out = LoadAnswers(requests=len(mine))
        tallies: dict[str, _Tally] = {}
        changed: list[tuple[bool, ChangedAnswer]] = []  # (its score moved, the answer)
        for trace in mine:
            if not trace.ok:
                out.failed += 1
                continue
            ref = trace.item
            assert ref is not None
            tally = tallies.setdefault(ref.task, _Tally())
            tally.requests += 1
            spec, rest = self.tasks[ref.task], self.rest.get((ref.task, ref.id))
            if spec.note:  # cut short under load: a difference would be the cut's, not the load's
                continue
            if rest is None:
                tally.no_rest += 1
                continue
            tally.compared += 1
            score = self._score(spec, ref.id, trace.text, rest)
            if score is None:
                tally.unscored += 1
            else:
                tally.scores.setdefault(ref.id, []).append(score)
                tally.rest[ref.id] = rest.score
            if trace.text.strip() != rest.output.strip():
                tally.changed += 1
                changed.append((score is not None and score != rest.score, ChangedAnswer(
                    task=ref.task, id=ref.id, at_rest=rest.output[:EXAMPLE_CHARS],
                    under_load=trace.text[:EXAMPLE_CHARS], at_rest_score=rest.score, under_load_score=score)))
        for name in sorted(tallies):
            out.tasks[name] = self._task(self.tasks[name], tallies[name])
        out.compared = sum(t.compared for t in out.tasks.values())
        out.changed = sum(t.changed for t in out.tasks.values())
        out.examples = _examples(changed)
        out.p_value = _level_p([t.p_value for t in out.tasks.values() if t.p_value is not None])
        if self.sandbox_left <= 0 and any(self.tasks[n].metric.sandboxed for n in out.tasks):
            out.note = (f"the sandbox's budget ({self.sandbox_budget} distinct changed answers a load test runs "
                        "in the sandbox) is spent: sandboxed tasks are compared, not scored, from here on")
        return out

    def _score(self, spec: _Task, item_id: str, text: str, rest: SampleRecord) -> float | None:
        """The answer's score: the one at rest for the same text, else the metric's, once per
        distinct text; None when a sandboxed metric's budget is spent."""
        from selector.tasks import ScoreInput
        from selector.tasks.metrics import check_score

        if text == rest.output:
            return rest.score
        key = (spec.task.name, item_id, text)
        if key in self.cache:
            return self.cache[key]
        if spec.metric.sandboxed:
            if self.sandbox_left <= 0:
                return None
            self.sandbox_left -= 1
        item, style = spec.items[item_id], spec.style
        scored = spec.metric.score_batch([ScoreInput(output=text, target=item.targets[style], fields=item.fields,
                                                     prompt=item.prompts[style], style=style)], spec.task.metric_args)
        self.cache[key] = value = check_score(scored[0].value, spec.task.name, item_id, spec.task.metric)
        return value

    def _task(self, spec: _Task, tally: _Tally) -> TaskAnswers:
        out = TaskAnswers(metric=spec.task.metric, higher_is_better=spec.metric.higher_is_better,
                          requests=tally.requests, compared=tally.compared, changed=tally.changed)
        notes = [spec.note] if spec.note else []
        if tally.no_rest:
            notes.append(f"{tally.no_rest} answers of items without an answer at rest are not compared")
        if tally.unscored:
            notes.append(f"not scored at this level: {tally.unscored} changed answers came after the sandbox's "
                         f"budget ({self.sandbox_budget} distinct answers per load test) was spent")
        out.note = "; ".join(notes)
        if spec.note or tally.unscored or not tally.scores:
            return out
        fill_statistics(out, tally.scores, tally.rest, spec.metric.binary, self.confidence, self.ci_method)
        return out


def fill_statistics(out: TaskAnswers, scores: dict[str, list[float]], rest: dict[str, float], binary: bool,
                    confidence: float, ci_method: str) -> None:
    """Accuracy with its interval, and the paired test against the answers at rest, over items:
    each item's mean score under load (scores: item id -> its scores) against its score at rest."""
    from selector.stats import mean_interval
    from selector.stats_paired import paired_binary, paired_fractional

    ids = sorted(scores)
    load = np.array([float(np.mean(scores[i])) for i in ids])
    at_rest = np.array([rest[i] for i in ids], dtype=float)
    out.scored = sum(len(scores[i]) for i in ids)
    out.items = len(ids)
    out.item_scores = {i: float(v) for i, v in zip(ids, load)}
    out.value, out.at_rest = float(load.mean()), float(at_rest.mean())
    out.ci_low, out.ci_high, out.ci_method = mean_interval(load.tolist(), binary, confidence, ci_method)
    zero_one = binary and bool(np.all(np.isin(load, (0, 1))) and np.all(np.isin(at_rest, (0, 1))))
    if zero_one:
        out.diff_low, out.diff_high, out.flips_to_wrong, out.flips_to_right, out.p_value = paired_binary(
            load, at_rest, confidence)
        out.test = "mcnemar"
    else:
        out.diff_low, out.diff_high, out.p_value = paired_fractional(load - at_rest, confidence)
        right, right_at_rest = load >= RIGHT_AT, at_rest >= RIGHT_AT
        out.flips_to_wrong = int(np.sum(right_at_rest & ~right))
        out.flips_to_right = int(np.sum(~right_at_rest & right))
        out.test = "wilcoxon"


def _level_p(pvalues: list[float]) -> float | None:
    from selector.stats_paired import holm

    return min(holm(pvalues)) if pvalues else None


def _examples(changed: list[tuple[bool, ChangedAnswer]]) -> list[ChangedAnswer]:
    """The first few changed answers, one per item, those whose score moved first."""
    out: list[ChangedAnswer] = []
    seen: set[tuple[str, str]] = set()
    for _, answer in sorted(changed, key=lambda c: not c[0]):  # stable: request order within each kind
        if (answer.task, answer.id) not in seen and len(out) < EXAMPLES:
            seen.add((answer.task, answer.id))
            out.append(answer)
    return out


def describe(answers: LoadAnswers) -> str:
    """One line for the log: 'answers: 3 of 24 differ from those at rest (12.5%); arithmetic 75.0%
    against 87.5% at rest (McNemar p 0.25)'."""
    share = f" ({answers.share:.1%})" if answers.share is not None else ""
    parts = [f"{answers.changed} of {answers.compared} differ from those at rest{share}"]
    for name, t in answers.tasks.items():
        if t.value is not None and t.at_rest is not None:
            parts.append(f"{name} {t.value:.1%} against {t.at_rest:.1%} at rest "
                         f"({'McNemar' if t.test == 'mcnemar' else 'Wilcoxon'} p {t.p_value:.3g})")
    if answers.failed:
        parts.append(f"{answers.failed} failed")
    return "answers: " + "; ".join(parts)
