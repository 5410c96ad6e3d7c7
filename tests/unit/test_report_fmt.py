from __future__ import annotations

import pytest

from selector.report import fmt
from selector.records import TaskResult


def _result(value: float, low: float, high: float) -> TaskResult:
    return TaskResult(task="t", metric="exact_match", value=value, ci_low=low, ci_high=high, n=40)


def test_accuracy_with_ci_as_percent() -> None:
    assert fmt.accuracy_ci(_result(0.825, 0.680, 0.9126)) == "82.5% [68.0–91.3]"
    assert fmt.accuracy_ci(None) == fmt.DASH


def test_metric_outside_unit_interval_is_not_a_percent() -> None:
    assert fmt.accuracy_ci(_result(12.5, 10.0, 15.26)) == "12.5 [10.0–15.3]"


@pytest.mark.parametrize(("value", "text"), [
    (0.0, "0"), (0.09688, "0.0969"), (1.2799, "1.28"), (3.5542, "3.55"), (427.9, "428"),
    (12_345.0, "12,345"), (2.5e7, "2.50e+07"),
])
def test_significant_digits(value: float, text: str) -> None:
    assert fmt.sig(value) == text


def test_sizes_and_durations() -> None:
    assert fmt.gigabytes(1_279_503_360) == "1.28"
    assert fmt.gigabytes(None) == fmt.DASH
    assert fmt.params(134_515_008) == "135M"
    assert fmt.params(1_777_088_000) == "1.78B"
    assert fmt.params(0) == fmt.DASH
    assert fmt.seconds(4.2) == "4.2 s"
    assert fmt.seconds(104.0) == "1 min 44 s"
    assert fmt.seconds(3724.0) == "1 h 02 min"
    assert fmt.millis(2942.4) == "2,942"
    assert fmt.millis(28.14) == "28.1"


def test_differences_use_a_real_minus_sign() -> None:
    assert fmt.points(-0.925) == "−92.5 pp"
    assert fmt.points(0.025) == "+2.5 pp"
    assert fmt.diff_ci(-0.119, 0.018) == "[−11.9, +1.8] pp"
    assert fmt.pvalue(0.0004) == "<0.001"
    assert fmt.pvalue(0.0312) == "0.031"


def test_free_form_values() -> None:
    assert fmt.value(None) == fmt.DASH
    assert fmt.value(True) == "yes"
    assert fmt.value(385) == "385"
    assert fmt.value(123_456) == "123,456"
    assert fmt.value(15.4789) == "15.5"
    assert fmt.value(-0.02) == "-0.02" and fmt.value(1.0) == "1" and fmt.value(0.925) == "0.925"
    assert fmt.value(["a", 1]) == "a, 1"
    assert fmt.value({"ttft_ms": 500}) == "ttft_ms=500"
    assert fmt.label("n_for_5pp") == "n for 5pp"
