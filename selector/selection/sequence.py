"""The winner's error: fixed-sequence testing down the size ladder (policy.winner_control).

Each variant's claim "meets every floor" is a test at the policy's level (under lower_bound, every
floor's one-sided bound at (1 + confidence) / 2: an intersection-union test, so several floors need
no split). Picking the smallest of several variants that each pass their own test lets the chance
that the chosen one truly misses grow towards the sum of the per-variant errors. With
`winner_control: fixed_sequence` the variants are tested in a fixed order, largest first (model
parameters, then precision bits: known before any score), and the walk stops at the first variant
that does not pass: only variants before that point can be claimed, and the smallest of those is
recommended. A false claim needs the first truly-failing variant of the sequence to pass its own
test, so P(the recommended variant misses a floor it claims to meet) <= the level (Maurer et al.
1995; Westfall & Krishen 2001).

What is in the sequence: completed variants and those the search stopped early (a failure: it
stops the walk). Left out: variants that could not run here or crashed (that depends on the
machine, not on any score), variants the search found not needed (below the stop, or siblings of a
failing baseline), and variants that fail a memory budget or a latency limit on what they measured:
those are measurements, not hypotheses under test, and they cannot be recommended whatever their
accuracy. Which variants they are does not depend on any accuracy score, so leaving them out keeps
the level (issue 36: a budget the largest variant missed used to stop the walk at once, leaving no
winner).

One order for the selection and the search: `ladder_order` is the order both walk (the sweep's
search gets it from the plan, selection.ladder from the records; both read the model's nominal
parameters, `model.params_b`, and the precision's bits).
"""

from __future__ import annotations

from collections.abc import Iterable

from selector.config import PolicyConfig
from selector.selection.checks import measured_checks
from selector.selection.precision import record_bits, record_params
from selector.records import RunRecord
from selector.verdicts import Check

CONTROLS = ("none", "fixed_sequence")


def ladder_order(entries: Iterable[tuple[str, float, int]]) -> list[str]:
    """(name, parameters, bits) -> the names in the fixed order: largest first (parameters, then
    precision bits, then name)."""
    return [name for name, _, _ in sorted(entries, key=lambda e: (-e[1], -e[2], e[0]))]


def in_sequence(record: RunRecord, policy: PolicyConfig) -> bool:
    """Whether a completed or stopped variant is tested in the sequence: not when it fails a memory
    budget or a latency limit on a figure it measured (a figure not measured decides nothing here)."""
    return all(c.passed or c.value is None for c in measured_checks(record, policy))


def ladder(records: list[RunRecord], policy: PolicyConfig | None = None) -> list[str]:
    """The fixed order of the variants the sequence tests (see the module doc)."""
    tested = [r for r in records if r.status in ("completed", "stopped")
              and (policy is None or in_sequence(r, policy))]  # fmt: skip
    return ladder_order((r.name, record_params(r), record_bits(r)) for r in tested)


def walk(sequence: list[str], passes: dict[str, bool]) -> tuple[set[str], str | None]:
    """(the variants the sequence claims, the one it stopped at or None)."""
    claimed: set[str] = set()
    for name in sequence:
        if not passes.get(name, False):
            return claimed, name
        claimed.add(name)
    return claimed, None


def blocked_check(stopped_at: str) -> Check:
    """The check a variant fails when it passes its own floors below the sequence's stop."""
    return Check(name="fixed_sequence", value=None, limit=0.0, passed=False, rule="fixed_sequence",
                 detail=f"meets its floors, but the fixed sequence down the size ladder stopped at the larger "
                        f"{stopped_at}, so it cannot be claimed at the policy's level")  # fmt: skip
