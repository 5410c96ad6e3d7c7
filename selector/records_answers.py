"""Answers under load, as a record keeps them: per load level (LoadLevel.answers), the eval items'
answers the level's requests got, scored with each task's metric and compared with the same
variant's answers at rest (its evaluation). selector.measure.answers fills them; docs/load-testing.md,
"Answers under load", says how.

Apart from selector.records (which imports this module for LoadLevel) only to keep that module
small; the same strictness: an unknown field is an error.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    """As selector.records.StrictModel: unknown fields are an error."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())


class ChangedAnswer(_Strict):
    """One request whose answer under load differs from the item's answer at rest."""

    task: str
    id: str
    at_rest: str  # cut to EXAMPLE_CHARS characters
    under_load: str
    at_rest_score: float
    under_load_score: float | None = None  # None: not scored (the task's note says why)


class TaskAnswers(_Strict):
    """One task's answers at one level.

    Counts are of requests (a level cycles the eval set's prompts, so an item may be sent several
    times); accuracy and the paired test are over items: each item's mean score over its requests
    at the level against its score at rest, so an item sent three times is one pair, not three."""

    metric: str
    higher_is_better: bool = True
    requests: int  # requests of this task that answered (failed ones are LoadAnswers.failed)
    compared: int = 0  # of those, compared with the answer at rest (none when the note says why not)
    changed: int = 0  # of those, whose answer differs from the one at rest (whitespace at the ends ignored)
    scored: int = 0  # answers scored with the task's metric (0: note says why none)
    items: int = 0  # distinct items scored
    value: float | None = None  # accuracy under load: the mean over items of each item's mean score
    ci_low: float | None = None  # its interval at policy.confidence, by policy.ci_method
    ci_high: float | None = None
    ci_method: str = ""
    at_rest: float | None = None  # the same items' accuracy at rest
    diff_low: float | None = None  # the paired interval of (under load - at rest), Tango or betting
    diff_high: float | None = None
    flips_to_wrong: int = 0  # items right at rest, wrong under load (fractional scores: at the 0.5 cut)
    flips_to_right: int = 0
    test: str = ""  # mcnemar (0/1 scores) | wilcoxon (fractional)
    p_value: float | None = None  # that paired test's two-sided p, under load against at rest
    item_scores: dict[str, float] = Field(default_factory=dict)  # item id -> its mean score under load
    note: str = ""  # why this task's answers are not scored (or only compared), in words

    @property
    def share(self) -> float | None:
        return self.changed / self.compared if self.compared else None


class LoadAnswers(_Strict):
    """One level's answers: how many differ from the evaluation's, and each task's accuracy."""

    requests: int  # requests made from eval items (the rest of the level's requests carry none)
    failed: int = 0  # of those, failed or cut off: no answer to compare
    compared: int = 0  # answered, with the item's answer at rest to compare with
    changed: int = 0  # of those, answers that differ from the ones at rest
    tasks: dict[str, TaskAnswers] = Field(default_factory=dict)
    # The smallest of the tasks' paired p-values after Holm's adjustment over the level's tasks: the
    # level's test of "some task's accuracy moved under load" (None: no task was scored)
    p_value: float | None = None
    examples: list[ChangedAnswer] = Field(default_factory=list)  # the first few changed answers, one per item
    note: str = ""  # what was left out, in words (a sandboxed metric's budget)

    @property
    def share(self) -> float | None:
        return self.changed / self.compared if self.compared else None


CAPACITY = "capacity"  # the level key of the capacity search's confirmation run, at the planned rate


LEVEL_KEY = re.compile(r"^(c[1-9]\d*|r\d+(\.\d+)?|capacity)$")


def check_level_key(key: str | None) -> str | None:
    """The problem with a level key (policy.floors_under_load), in words; None: it is one."""
    if key is None or LEVEL_KEY.match(str(key)):
        return None
    return (f"{key!r} is not a load level: name one as c<concurrency> (c8), r<requests per second> (r2.5) or "
            f"{CAPACITY} (the capacity search's confirmation run)")


def level_key(concurrency: int | None, rate_rps: float | None, replay_scale: float | None = None) -> str:
    """A load level's key, as policy.floors_under_load names it: "c8" (concurrency 8), "r2.5" (2.5
    req/s), "recorded" (a request file's arrival times); the confirmation run is CAPACITY."""
    if concurrency is not None:
        return f"c{concurrency}"
    if replay_scale is not None:
        return "recorded"
    return f"r{rate_rps:g}"


def answer_metrics(base: str, answers: LoadAnswers, prefix: str = "") -> dict[str, float]:
    """MLflow metrics of one level's answers: <base>/<prefix>answers_changed, answers_changed_share,
    answers_compared, answers_failed, answers_p (the level's Holm-adjusted p) and, per task,
    answers_changed/<task>, accuracy/<task>, accuracy_ci_low/<task>, accuracy_ci_high/<task>,
    accuracy_at_rest/<task> (the same items at rest) and answers_p/<task>."""
    m = {f"{base}/{prefix}answers_changed": float(answers.changed),
         f"{base}/{prefix}answers_compared": float(answers.compared),
         f"{base}/{prefix}answers_failed": float(answers.failed)}
    if answers.share is not None:
        m[f"{base}/{prefix}answers_changed_share"] = answers.share
    if answers.p_value is not None:
        m[f"{base}/{prefix}answers_p"] = answers.p_value
    for task, t in answers.tasks.items():
        m[f"{base}/{prefix}answers_changed/{task}"] = float(t.changed)
        for name, value in (("accuracy", t.value), ("accuracy_ci_low", t.ci_low), ("accuracy_ci_high", t.ci_high),
                            ("accuracy_at_rest", t.at_rest), ("answers_p", t.p_value)):
            if value is not None:
                m[f"{base}/{prefix}{name}/{task}"] = value
    return m
