"""Metrics: how one model output is scored against its gold answer.

Each metric declares whether a higher score is better and whether it is binary (0/1 per item) or
graded (in [0, 1]; the interval is the policy's ci_method either way, selector.stats.mean_interval),
which `metric_args` it accepts with their defaults, and what it needs from every row (checked when
the eval set loads, before any model). Every score must be a number in [0, 1] (`check_score`).
All are implemented here in a few lines each: Hugging Face `evaluate` loads its metrics from the
hub, which this tool must not need.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from numbers import Real
from dataclasses import dataclass, field
from typing import Any

from selector.generation import Loglikelihood
from selector.registry import Registry
from selector.tasks.sandbox import run_python


@dataclass(frozen=True)
class ScoreInput:
    output: str  # the model's text (generate) or the chosen choice (multiple_choice)
    target: str  # the rendered gold answer
    fields: Mapping[str, str]  # the row, as written
    prompt: str = ""  # the item's rendered prompt in the style used, without few-shot examples
    style: str = "chat"  # chat | plain


@dataclass(frozen=True)
class Scored:
    value: float
    detail: dict[str, Any] = field(default_factory=dict)  # why, for the sample record (e.g. a traceback)


class MetricArgError(ValueError):
    def __init__(self, arg: str, problem: str) -> None:
        self.arg, self.problem = arg, problem
        super().__init__(f"{arg}: {problem}")


@dataclass(frozen=True)
class Metric:
    name: str
    higher_is_better: bool
    binary: bool
    score: Callable[[ScoreInput, Mapping[str, Any]], float | Scored]
    defaults: Mapping[str, Any] = field(default_factory=dict)  # accepted metric_args and their defaults
    allowed: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # enumerated args
    multiple_choice: bool = False  # scores a chosen choice (loglikelihood), not generated text
    required_fields: Callable[[Mapping[str, Any]], list[str]] = lambda args: []
    check_target: Callable[[str, Mapping[str, Any]], str | None] = lambda target, args: None
    # Runs the model's output in a sandbox (tens of ms a score): the load test scores such answers
    # within a budget (selector.measure.answers)
    sandboxed: bool = False

    def resolve_args(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Defaults merged with `given`; raises MetricArgError on unknown names or wrong types."""
        args = dict(self.defaults)
        for key, value in given.items():
            if key not in self.defaults:
                known = ", ".join(sorted(self.defaults)) or "none"
                raise MetricArgError(str(key), f"metric {self.name!r} takes no argument {key!r} (it takes: {known})")
            default = self.defaults[key]
            if isinstance(default, bool):
                ok = isinstance(value, bool)
            elif isinstance(default, (int, float)):
                ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            else:
                ok = isinstance(value, type(default))
            if not ok:
                raise MetricArgError(str(key), f"must be {type(default).__name__}, got {value!r}")
            if key in self.allowed and value not in self.allowed[key]:
                raise MetricArgError(str(key), f"must be one of {', '.join(self.allowed[key])}, got {value!r}")
            args[key] = value
        return args

    def score_batch(self, inputs: Sequence[ScoreInput], args: Mapping[str, Any]) -> list[Scored]:
        """One Scored per input, the value as the metric returned it: check_score says whether it is
        a score (the caller knows the task and the item, for the error)."""
        out = []
        for one in inputs:
            result = self.score(one, args)
            out.append(result if isinstance(result, Scored) else Scored(result))  # type: ignore[arg-type]
        return out


class InvalidScoreError(ValueError):
    """A metric returned something that is not a number in [0, 1] for one item. `kept`: the items of
    the same call that were scored properly, so the caller can store them before failing."""

    def __init__(self, task: str, item: str, metric: str, value: Any, kept: Sequence[Any] = ()) -> None:
        self.task, self.item, self.metric, self.value, self.kept = task, item, metric, value, list(kept)
        super().__init__(f"task {task!r}, item {item!r}: metric {metric!r} returned {value!r}, and a score must be "
                         "a number in [0, 1]; the items scored before it are kept")

    def __reduce__(self):  # type: ignore[no-untyped-def]  # crosses process boundaries
        return (type(self), (self.task, self.item, self.metric, self.value))


def check_score(value: Any, task: str, item: str, metric: str) -> float:
    """The score as a float, or InvalidScoreError: NaN, None, infinities, strings and anything outside
    [0, 1] would poison the task's mean, its interval and the early stop (issue 36, point 7)."""
    if not isinstance(value, Real) or not math.isfinite(float(value)) or not 0.0 <= float(value) <= 1.0:
        raise InvalidScoreError(task, item, metric, value)
    return float(value)


# ---- text normalisation ----


def _strip_punctuation(text: str) -> str:
    """Punctuation and spaces off both ends only ("Lyon." -> "Lyon"); inner ones ("03/14") stay."""
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


_NORMALIZE_DEFAULTS = {"ignore_case": False, "strip": True, "strip_punctuation": False, "first_line": False}


def _exact_match(x: ScoreInput, args: Mapping[str, Any]) -> float:
    return float(normalize(x.output, **args) == normalize(x.target, **args))


def _contains(x: ScoreInput, args: Mapping[str, Any]) -> float:
    return float(normalize(x.target, **args) in normalize(x.output, **args))


def _non_empty_target(target: str, args: Mapping[str, Any]) -> str | None:
    return None if normalize(target, **args) else "target is empty after normalisation"


# ---- numbers ----

_NUMBER = re.compile(
    r"(?<![\w.])"  # not inside a word or after a decimal point ("5-3" is 5 and 3)
    r"(?P<sign>[-+\u2212]?)[$\u20ac\u00a3\u00a5]?"  # sign, then an optional currency symbol
    r"(?P<int>\d{1,3}(?:,\d{3})+(?!\d)|\d+)?"  # 1,234 or 1234
    r"(?P<frac>\.\d+)?"  # .5 (a bare trailing "12." is the integer 12)
)


def numbers(text: str) -> list[float]:
    """Every number in the text, in order: "1,234" -> 1234, "$12" -> 12, "-3.5", "12." -> 12."""
    found = []
    for m in _NUMBER.finditer(text):
        if not (m.group("int") or m.group("frac")):
            continue
        digits = (m.group("int") or "0").replace(",", "") + (m.group("frac") or "")
        value = float(digits)
        found.append(-value if m.group("sign") in ("-", "\u2212") else value)
    return found


def _numeric(x: ScoreInput, args: Mapping[str, Any]) -> Scored:
    found = numbers(x.output)
    target = numbers(x.target)
    if not found or len(target) != 1:
        return Scored(0.0, {"parsed": None})
    value = found[-1] if args["which"] == "last" else found[0]
    ok = math.isclose(value, target[0], rel_tol=args["rel_tol"], abs_tol=args["abs_tol"])
    return Scored(float(ok), {"parsed": value})


def _numeric_target(target: str, args: Mapping[str, Any]) -> str | None:
    found = numbers(target)
    return None if len(found) == 1 else f"target {target!r} must hold exactly one number, found {len(found)}"


# ---- token F1 (for extracted spans) ----


def _tokens(text: str, ignore_case: bool) -> list[str]:
    return re.findall(r"\w+", text.casefold() if ignore_case else text)


def _f1(x: ScoreInput, args: Mapping[str, Any]) -> float:
    pred, gold = _tokens(x.output, args["ignore_case"]), _tokens(x.target, args["ignore_case"])
    if not pred or not gold:
        return float(pred == gold)
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


# ---- code ----

_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\r?\n(.*?)(?:\r?\n[ \t]*```|\Z)", re.S | re.I)


def extract_code(output: str, prompt: str = "", prepend_prompt: bool = False, style: str = "chat") -> str:
    """The program in a model output: a ```python block if there is one (closed or cut off by a
    stop sequence), else the raw text; in plain style with prepend_prompt the prompt (a signature
    and docstring) comes first, since the model only wrote the body."""
    fenced = _FENCE.search(output)
    if fenced:
        return fenced.group(1)
    if prepend_prompt and style == "plain":
        return prompt + output
    return output


def _code_tests(x: ScoreInput, args: Mapping[str, Any]) -> Scored:
    code = extract_code(x.output, x.prompt, args["prepend_prompt"], x.style)
    result = run_python(code + "\n\n" + x.fields[args["tests_field"]], timeout_s=args["timeout_s"],
                        memory_mb=int(args["memory_mb"]))
    return Scored(
        float(result.passed),
        {"returncode": result.returncode, "timed_out": result.timed_out, "stderr_tail": result.stderr_tail[-600:]},
    )


# ---- multiple choice ----


def pick_choice(results: Sequence[Loglikelihood], continuations: Sequence[str], normalize: str = "none") -> int:
    """Index of the most likely choice; `normalize` divides by length (chars: lm-eval's acc_norm)."""

    def key(i: int) -> float:
        r = results[i]
        if normalize == "chars":
            return r.logprob / max(1, len(continuations[i]))
        if normalize == "tokens":
            return r.logprob / max(1, r.tokens)
        return r.logprob

    return max(range(len(results)), key=key)  # ties: the first listed choice


def _choice_accuracy(x: ScoreInput, args: Mapping[str, Any]) -> float:
    return float(x.output == x.target)


EXACT_MATCH = Metric("exact_match", True, True, _exact_match, _NORMALIZE_DEFAULTS, check_target=_non_empty_target)
CONTAINS = Metric("contains", True, True, _contains, _NORMALIZE_DEFAULTS, check_target=_non_empty_target)
NUMERIC = Metric(
    "numeric", True, True, _numeric, {"which": "last", "abs_tol": 1e-6, "rel_tol": 0.0},
    allowed={"which": ("last", "first")}, check_target=_numeric_target,
)
F1 = Metric("f1", True, False, _f1, {"ignore_case": True})
CODE_TESTS = Metric(
    "code_tests", True, True, _code_tests,
    {"prepend_prompt": False, "tests_field": "tests", "timeout_s": 10.0, "memory_mb": 512},
    required_fields=lambda args: [args["tests_field"]], sandboxed=True,
)
CHOICE_ACCURACY = Metric(
    "choice_accuracy", True, True, _choice_accuracy, {"normalize": "none"},
    allowed={"normalize": ("none", "chars", "tokens")}, multiple_choice=True,
)

METRICS: Registry[Metric] = Registry("metric")
for _name, _attr in [("exact_match", "EXACT_MATCH"), ("contains", "CONTAINS"), ("numeric", "NUMERIC"), ("f1", "F1"),
                     ("code_tests", "CODE_TESTS"), ("choice_accuracy", "CHOICE_ACCURACY")]:
    METRICS.register(_name, f"selector.tasks.metrics:{_attr}")


def get_metric(name: str) -> Metric:
    """Raises selector.registry.UnknownNameError (with did-you-mean) for an unknown name."""
    metric = METRICS.get(name)
    assert isinstance(metric, Metric)
    return metric
