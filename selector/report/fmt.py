"""Number formatting shared by the HTML, Markdown and terminal renderings.

Every function returns a plain string (never markup), so each renderer escapes it the same way.
"""

from __future__ import annotations

import math
from typing import Any

from selector.records import TaskResult

DASH = "—"
GB = 1e9  # decimal gigabytes, the unit of the policy's max_weight_gb


def is_fraction(result: TaskResult) -> bool:
    """A metric in [0, 1] (accuracy, exact match...) is shown as a percentage."""
    return 0.0 <= result.ci_low <= result.ci_high <= 1.0 and 0.0 <= result.value <= 1.0


def pct(value: float | None, digits: int = 1) -> str:
    if value is None or not math.isfinite(value):
        return DASH
    return f"{value * 100:.{digits}f}%"


def decided(result: TaskResult, verdict: Any = None) -> TaskResult:
    """The result with the interval the selection judged it by (Verdict.intervals), so the report
    never shows another one than the decision used; the stored one for records without it."""
    interval = getattr(verdict, "intervals", {}).get(result.task) if verdict is not None else None
    if interval is None:
        return result
    return result.model_copy(update={"ci_low": interval.low, "ci_high": interval.high, "ci_method": interval.method})


def accuracy_ci(result: TaskResult | None, verdict: Any = None) -> str:
    """'82.5% [68.0–91.3]' for proportions, '0.823 [0.700–0.910]' for other metrics; the decision's
    interval when the verdict carries one."""
    if result is None:
        return DASH
    result = decided(result, verdict)
    if is_fraction(result):
        return f"{result.value * 100:.1f}% [{result.ci_low * 100:.1f}–{result.ci_high * 100:.1f}]"
    return f"{sig(result.value)} [{sig(result.ci_low)}–{sig(result.ci_high)}]"


def sig(value: float | None, digits: int = 3) -> str:
    """A float with `digits` significant digits, without scientific notation for ordinary sizes."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return DASH
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    if magnitude >= 6 or magnitude < -4:
        return f"{value:.{digits - 1}e}"
    decimals = max(0, digits - 1 - magnitude)
    return f"{value:,.{decimals}f}"


def gigabytes(n_bytes: int | float | None) -> str:
    if n_bytes is None:
        return DASH
    return sig(n_bytes / GB)


def params(n: int) -> str:
    """Parameter count as '135M' / '1.78B'."""
    if n <= 0:
        return DASH
    if n >= 1e9:
        return f"{sig(n / 1e9)}B"
    if n >= 1e6:
        return f"{sig(n / 1e6)}M"
    return f"{sig(n / 1e3)}K"


def millis(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return DASH
    return f"{value:,.0f}" if value >= 100 else sig(value)


def seconds(value: float | None) -> str:
    """A duration for a person: '42 s', '15 min 40 s', '1 h 02 min'."""
    if value is None or not math.isfinite(value):
        return DASH
    if value < 60:
        return f"{sig(value, 2)} s" if value < 10 else f"{value:.0f} s"
    minutes, secs = divmod(round(value), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def pvalue(p: float | None) -> str:
    if p is None or not math.isfinite(p):
        return DASH
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def _signed(diff: float) -> str:
    return f"{diff * 100:+.1f}".replace("-", "−")  # a real minus sign reads better in tables


def points(diff: float) -> str:
    """A difference of proportions in percentage points: '+2.5 pp'."""
    return f"{_signed(diff)} pp"


def diff_ci(low: float, high: float) -> str:
    """'[−3.0, +8.0] pp'."""
    return f"[{_signed(low)}, {_signed(high)}] pp"


def value(v: Any) -> str:
    """Any JSON-ish value from a free-form dict (sensitivity, sample-size rows, environment)."""
    if v is None:
        return DASH
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10_000 else str(v)
    if isinstance(v, float):
        text = sig(v)  # free-form values: no trailing zeros ("0.02", not "0.0200")
        return text.rstrip("0").rstrip(".") if "." in text and "e" not in text else text
    if isinstance(v, (list, tuple)):
        return ", ".join(value(x) for x in v)
    if isinstance(v, dict):
        return ", ".join(f"{k}={value(x)}" for k, x in v.items())
    return str(v)


def label(key: str) -> str:
    """'n_for_5pt' -> 'n for 5pt': a column header from a free-form dict key."""
    return key.replace("_", " ").strip()
