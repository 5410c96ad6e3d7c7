"""Metrics scored on real strings (and, for code_tests, real sandboxed runs)."""

from __future__ import annotations

import pytest

from selector.generation import Loglikelihood
from selector.registry import UnknownNameError
from selector.tasks.metrics import (
    METRICS,
    MetricArgError,
    ScoreInput,
    extract_code,
    get_metric,
    normalize,
    numbers,
    pick_choice,
)


def score(metric: str, output: str, target: str, fields: dict[str, str] | None = None, prompt: str = "",
          style: str = "chat", **args: object) -> float:
    m = get_metric(metric)
    resolved = m.resolve_args(args)
    return m.score_batch([ScoreInput(output, target, fields or {}, prompt, style)], resolved)[0].value


def test_registry_lists_every_metric_and_suggests_close_names() -> None:
    assert METRICS.names() == ["choice_accuracy", "code_tests", "contains", "exact_match", "f1", "numeric"]
    with pytest.raises(UnknownNameError, match="Did you mean 'exact_match'"):
        get_metric("exact_mach")


def test_metrics_declare_direction_and_kind() -> None:
    assert all(get_metric(n).higher_is_better for n in METRICS.names())
    assert [n for n in METRICS.names() if not get_metric(n).binary] == ["f1"]
    assert get_metric("choice_accuracy").multiple_choice and not get_metric("exact_match").multiple_choice


# ---- exact_match / contains ----


def test_exact_match_default_strips_whitespace_only() -> None:
    assert score("exact_match", "  Lyon \n", "Lyon") == 1.0
    assert score("exact_match", "lyon", "Lyon") == 0.0
    assert score("exact_match", "Lyon.", "Lyon") == 0.0


def test_exact_match_normalisation_args() -> None:
    assert score("exact_match", "lyon", "Lyon", ignore_case=True) == 1.0
    assert score("exact_match", '"Lyon."', "Lyon", strip_punctuation=True) == 1.0
    assert score("exact_match", "Lyon\nThe city is Lyon.", "Lyon", first_line=True) == 1.0
    assert score("exact_match", "\n\nLyon\nmore", "Lyon", first_line=True) == 1.0
    assert score("exact_match", "Lyon\nmore", "Lyon") == 0.0


def test_strip_punctuation_keeps_inner_punctuation_of_dates() -> None:
    assert normalize("14/07/2022.", strip_punctuation=True) == "14/07/2022"
    assert score("exact_match", "14/07/2022", "14.07.2022", strip_punctuation=True) == 0.0
    assert score("exact_match", "Oct. 12, 2023", "Oct. 12, 2023", strip_punctuation=True) == 1.0


def test_contains() -> None:
    assert score("contains", "The answer is Porto, I think", "Porto") == 1.0
    assert score("contains", "the answer is porto", "Porto") == 0.0
    assert score("contains", "the answer is porto", "Porto", ignore_case=True) == 1.0


# ---- numeric ----


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1,234", [1234.0]),
        ("$12", [12.0]),
        ("-3.5", [-3.5]),
        ("12.", [12.0]),
        ("Answer: 42", [42.0]),
        ("5-3", [5.0, 3.0]),
        ("It fell to -7 degrees", [-7.0]),
        ("\u22127", [-7.0]),
        ("-$12", [-12.0]),
        ("1,234.5 and .5", [1234.5, 0.5]),
        ("version v1.2", []),
        ("no numbers here", []),
    ],
)
def test_numbers_parses_common_formats(text: str, expected: list[float]) -> None:
    assert numbers(text) == expected


def test_numeric_takes_last_or_first_number() -> None:
    assert score("numeric", "6 * 7 = 42", "42") == 1.0
    assert score("numeric", "6 * 7 = 42", "42", which="first") == 0.0
    assert score("numeric", "42 apples in 3 boxes", "42", which="first") == 1.0
    assert score("numeric", "The answer is $1,234.", "1234") == 1.0
    assert score("numeric", "-7", "-7") == 1.0 and score("numeric", "7", "-7") == 0.0
    assert score("numeric", "I do not know", "3") == 0.0


def test_numeric_tolerance() -> None:
    assert score("numeric", "3.14159", "3.14") == 0.0
    assert score("numeric", "3.14159", "3.14", abs_tol=0.01) == 1.0
    assert score("numeric", "1010", "1000", rel_tol=0.02) == 1.0


def test_numeric_rejects_a_target_that_is_not_one_number() -> None:
    check = get_metric("numeric").check_target
    assert check("42", {}) is None
    assert "exactly one number" in (check("forty-two", {}) or "")
    assert "exactly one number" in (check("3 or 4", {}) or "")


# ---- f1 ----


def test_f1_token_overlap() -> None:
    assert score("f1", "Marta Kowalczyk", "Marta Kowalczyk") == 1.0
    assert score("f1", "Marta", "Marta Kowalczyk") == pytest.approx(2 / 3)
    assert score("f1", "the invoice goes to Marta", "Marta Kowalczyk") == pytest.approx(2 * (1 / 5) * (1 / 2) / (1 / 5 + 1 / 2))
    assert score("f1", "nobody", "Marta Kowalczyk") == 0.0
    assert score("f1", "", "") == 1.0


# ---- metric_args validation ----


def test_resolve_args_rejects_unknown_names_and_wrong_types() -> None:
    with pytest.raises(MetricArgError, match="takes no argument 'ignorecase'"):
        get_metric("exact_match").resolve_args({"ignorecase": True})
    with pytest.raises(MetricArgError, match="must be bool"):
        get_metric("exact_match").resolve_args({"ignore_case": "yes"})
    with pytest.raises(MetricArgError, match="must be one of last, first"):
        get_metric("numeric").resolve_args({"which": "middle"})
    with pytest.raises(MetricArgError, match="must be float"):
        get_metric("numeric").resolve_args({"abs_tol": True})
    assert get_metric("numeric").resolve_args({"abs_tol": 1}) == {"which": "last", "abs_tol": 1, "rel_tol": 0.0}


# ---- multiple choice ----


def test_pick_choice_by_logprob_and_length_normalised() -> None:
    results = [Loglikelihood(-4.0, 4, False), Loglikelihood(-3.0, 1, True)]
    continuations = [" a long answer", " no"]
    assert pick_choice(results, continuations) == 1
    assert pick_choice(results, continuations, "chars") == 0  # -4/14 > -3/3
    assert pick_choice(results, continuations, "tokens") == 0  # -1.0 > -3.0
    tie = [Loglikelihood(-1.0, 1, True), Loglikelihood(-1.0, 1, True)]
    assert pick_choice(tie, ["x", "y"]) == 0


def test_choice_accuracy() -> None:
    assert score("choice_accuracy", "positive", "positive") == 1.0
    assert score("choice_accuracy", "negative", "positive") == 0.0


# ---- code ----


def test_extract_code_prefers_a_python_fence() -> None:
    out = "Here you go:\n```python\ndef f(x):\n    return x + 1\n```\nThis adds one."
    assert extract_code(out) == "def f(x):\n    return x + 1"
    assert extract_code("```py\nprint(1)\n```") == "print(1)"
    assert extract_code("```\nprint(2)\n```") == "print(2)"
    # cut off by a stop sequence before the closing fence
    assert extract_code("```python\ndef f():\n    return 3") == "def f():\n    return 3"
    assert extract_code("def f():\n    return 3") == "def f():\n    return 3"


def test_extract_code_prepends_the_prompt_only_in_plain_style() -> None:
    prompt = 'def f(x):\n    """Add one."""\n'
    assert extract_code("    return x + 1", prompt, True, "plain") == prompt + "    return x + 1"
    assert extract_code("    return x + 1", prompt, True, "chat") == "    return x + 1"
    assert extract_code("    return x + 1", prompt, False, "plain") == "    return x + 1"


TESTS = {"tests": "assert add_one(1) == 2\nassert add_one(-1) == 0"}


def test_code_tests_passes_correct_code_in_a_fence() -> None:
    out = "```python\ndef add_one(x):\n    return x + 1\n```"
    assert score("code_tests", out, "", TESTS) == 1.0


def test_code_tests_fails_wrong_code_and_reports_why() -> None:
    m = get_metric("code_tests")
    result = m.score_batch([ScoreInput("def add_one(x):\n    return x", "", TESTS)], m.resolve_args({}))[0]
    assert result.value == 0.0
    assert result.detail["returncode"] == 1 and "AssertionError" in result.detail["stderr_tail"]


def test_code_tests_plain_body_needs_prepend_prompt() -> None:
    prompt = 'def add_one(x):\n    """Return x plus one."""\n'
    body = "    return x + 1"
    assert score("code_tests", body, "", TESTS, prompt=prompt, style="plain", prepend_prompt=True) == 1.0
    assert score("code_tests", body, "", TESTS, prompt=prompt, style="plain") == 0.0


def test_code_tests_reads_the_named_tests_field() -> None:
    out = "def add_one(x):\n    return x + 1"
    assert score("code_tests", out, "", {"checks": "assert add_one(0) == 1"}, tests_field="checks") == 1.0
    assert get_metric("code_tests").required_fields({"tests_field": "checks"}) == ["checks"]


def test_code_tests_times_out_on_a_hanging_solution() -> None:
    out = "def add_one(x):\n    while True:\n        pass"
    assert score("code_tests", out, "", TESTS, timeout_s=1.0) == 0.0
