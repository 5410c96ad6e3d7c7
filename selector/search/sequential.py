"""Early rejection of a variant: after each round of items, is some floor out of reach?

Each task's items are scored in one seeded random order (`evaluation_order`, the same for every
variant, so prefixes pair up item by item), a round of `round_size` items at a time. After a round,
every floor of the variant is tested: a `FloorTest` rejects only when, with probability at least
1 - alpha over the random order, the FULL evaluation of the task would fail the floor under the
policy's rule (the thresholds in `selector.search.thresholds`). The bound is anytime-valid: its
error is controlled over all looks together, not look by look.

Spending (0/1 scores): Pocock-type, alpha ln(1 + (e - 1) f), over the interim looks. Scoring items is
the cost, so alpha goes where it saves the most: an early look stops a clearly failing variant
before most of its items are scored, while late looks hardly need alpha (few items are left to
save, sampling without replacement shrinks the tail as n nears N, and a variant that cannot reach
the threshold even with every remaining item right is rejected with certainty). The last look, at
N, is exact for every test (0/1 and betting alike) and spends nothing. O'Brien-Fleming-type
spending lets 1/12 correct against a 60% floor run past the first look of a 200-item task (16
interim looks); linear spending is close to Pocock.
benchmarks/adaptive_simulation.py compares the three on items scored.

Several floors per variant: the variant's alpha is split evenly (Bonferroni) over its tests, so
P(any floor wrongly rejects) <= alpha. `floor_tests` does the split and says so in `VariantStopper`.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from selector.search import bounds
from selector.search.thresholds import EPS, full_set_threshold

WEIGHTED = "weighted"  # a floor on the weighted mix of tasks: no per-task test, never stopped early


def evaluation_order(n_items: int, seed: int, task: str) -> np.ndarray:
    """The seeded random order of a task's items, the same for every variant. It must be drawn
    before any score is seen and never re-drawn to get another chance: the guarantee is over it."""
    return np.random.default_rng([seed, zlib.crc32(task.encode())]).permutation(n_items)


def planned_looks(n_total: int, round_size: int) -> tuple[int, ...]:
    """Items seen after each round: round_size, 2 round_size, ..., n_total."""
    if round_size < 1 or n_total < 1:
        raise ValueError(f"round_size and n_total must be >= 1, got {round_size}, {n_total}")
    return tuple(range(round_size, n_total, round_size)) + (n_total,)


@dataclass(frozen=True)
class Decision:
    task: str
    reject: bool
    certain: bool  # no statistics involved: even every unseen item right would not be enough
    bound: float  # anytime bound on the full-set value (upper; lower for a ceiling), metric scale
    level: float  # simultaneous confidence of the bound over all looks; 1.0 when certain
    n_seen: int
    reason: str  # one line for people
    floor: float | None = None  # the policy's floor (a ceiling when lower is better); None for a margin


@dataclass(frozen=True)
class FloorTest:
    """One floor (or non-inferiority margin) of one task, tested on the full set's mean.

    threshold: what the full-set mean must reach (a ceiling when lower is better); for
    kind="non_inferiority" the mean difference to the reference oriented so that negative is worse
    (-margin, whichever way the metric points). limit: the policy's floor or -margin, for the
    reason text."""

    task: str
    threshold: float
    n_total: int
    alpha: float
    looks: tuple[int, ...]
    higher_is_better: bool = True
    binary: bool = True
    kind: str = "floor"  # floor | non_inferiority
    limit: float = math.nan
    rule: str = "point"
    spending: str = "pocock"

    @cached_property
    def levels(self) -> tuple[float, ...]:
        return bounds.look_levels(self.looks, self.n_total, self.alpha, self.spending)

    @cached_property
    def target(self) -> float:
        """The threshold on the oriented scale y in [0, 1], where higher is better."""
        if self.kind == "non_inferiority":  # threshold is already oriented: -margin, negative = worse
            return (self.threshold + 1) / 2
        return self.threshold if self.higher_is_better else 1 - self.threshold

    @cached_property
    def good_needed(self) -> int:
        """0/1 scores: the least count of oriented 1s the full set must hold (N + 1: unreachable)."""
        return self.n_total + 1 if math.isnan(self.target) else max(0, math.ceil(self.target * self.n_total - 1e-6))

    def oriented(self, values: Sequence[float]) -> np.ndarray:
        """Scores (or, for non_inferiority, differences in [-1, 1]) mapped to y in [0, 1], higher better."""
        v = np.asarray(values, dtype=float)
        low = -1.0 if self.kind == "non_inferiority" else 0.0
        if v.size and (v.min() < low - 1e-12 or v.max() > 1 + 1e-12):
            raise ValueError(f"{self.task}: values must lie in [{low:g}, 1]")
        y = v if self.higher_is_better else -v if self.kind == "non_inferiority" else 1 - v
        y = (y + 1) / 2 if self.kind == "non_inferiority" else y
        if self.binary and np.any((y != 0) & (y != 1)):
            raise ValueError(f"{self.task}: declared binary but has scores other than 0 and 1")
        return y

    def look_at(self, n_seen: int) -> int:
        """Index of the last planned look with at most n_seen items (-1: before the first)."""
        return int(np.searchsorted(self.looks, n_seen, side="right")) - 1

    def decide(self, values: Sequence[float]) -> Decision:
        """Test the floor on the first len(values) items of the evaluation order.

        The statistical test uses the prefix up to the last planned look (testing a look twice
        costs nothing); the certain check uses every item seen. With every item seen the full-set
        mean is known, so the decision is exact: a betting wealth that crossed 1/alpha on the way
        (Ville allows it with probability alpha) must not reject a set that meets the threshold."""
        y = self.oriented(values)
        n = y.size
        if n > self.n_total:
            raise ValueError(f"{self.task}: {n} scores for {self.n_total} items")
        if math.isnan(self.target):
            why = f"no full-set result on {self.n_total} items can pass the {self.rule} rule's floor"
            return self._decision(True, True, self._scale(1.0), 1.0, n, y, f"{why} {100 * self.limit:.1f}%")
        best_case = float(y.sum() + self.n_total - n) / self.n_total
        if best_case < self.target - (1e-9 if self.binary else 0.0):
            return self._decision(True, True, self._scale(best_case), 1.0, n, y)
        if n == self.n_total:  # every item known: the full-set mean decides, no statistics
            return self._decision(False, False, self._scale(best_case), 1.0, n, y)
        k = self.look_at(n)
        if k < 0:
            return self._decision(False, False, self._scale(best_case), 1.0, n, y)
        n_look, level = self.looks[k], self.levels[k]
        prefix = y[:n_look]
        if self.binary:
            ones = int(prefix.sum())
            reject = ones <= bounds.critical_counts(self.n_total, self.good_needed, self.looks, self.levels)[k]
            upper = bounds.binary_upper(ones, n_look, self.n_total, level) / self.n_total
        else:
            stakes = bounds.bets(prefix, self.target, self.n_total)
            wealth = bounds.log_capital(prefix, self.target, stakes, self.n_total)
            reject = bool(wealth.max() >= math.log(1 / self.alpha))
            upper = bounds.betting_upper(prefix, self.target, self.n_total, self.alpha)
            upper = min(upper, self.target) if reject else max(upper, self.target)  # bisection slack
        return self._decision(reject, False, self._scale(upper), 1 - self.alpha, n_look, prefix)

    def _scale(self, y_mean: float) -> float:
        """Oriented mean back to the metric's scale (a difference for non_inferiority)."""
        if self.kind == "non_inferiority":
            d = 2 * y_mean - 1
            return d if self.higher_is_better else -d
        return y_mean if self.higher_is_better else 1 - y_mean

    def _decision(self, reject, certain, bound, level, n, y, why="") -> Decision:
        reason = why or self._sentence(reject, certain, bound, level, n, y)
        floor = self.limit if self.kind == "floor" else None
        return Decision(self.task, reject, certain, bound, level, n, f"{self.task}: {reason}", floor)

    def _sentence(self, reject: bool, certain: bool, bound: float, level: float, n: int, y: np.ndarray) -> str:
        higher = self.higher_is_better
        if self.kind == "non_inferiority":
            value = f"mean difference to the reference {'at most' if higher else 'at least'} {100 * bound:+.1f} points"
            limit = f"{100 * abs(self.limit):.1f}-point margin"
            seen = f"{100 * self._scale(float(y.mean())) if n else 0:+.1f} points over {n} items"
        else:
            value = f"{'at most' if higher else 'at least'} {100 * bound:.1f}%"
            limit = f"{'floor' if higher else 'ceiling'} {100 * self.limit:.1f}%"
            seen = f"mean {100 * self._scale(float(y.mean())) if n else 0:.1f}% over {n} items"
            if self.binary and higher:
                seen = f"{int(y.sum())}/{n} correct"
        if certain:
            how = f"even if all {self.n_total - n} unseen items are right; certain, {seen}"
        elif n < self.looks[0]:
            how = f"before the first look at {self.looks[0]} items"
        elif n == self.n_total:
            how = f"all items seen: {seen}"
        else:
            how = f"{100 * level:.1f}% anytime bound after {n} items: {seen}"
        if self.kind == "floor" and abs(self.threshold - self.limit) > 2 * EPS:
            limit = f"{100 * self.threshold:.1f}%, what the full set needs to pass the {self.rule} rule's {limit}"
        op = ("<" if higher else ">") if reject else "could still reach"
        if self.kind == "non_inferiority":
            op = "is beyond the" if reject else "could stay within the"
        if n == self.n_total and not certain:  # exact: the full-set mean itself
            value = seen
            op = "is within the" if self.kind == "non_inferiority" else (">=" if higher else "<=")
            return f"all {n} items seen: {value} {op} {limit}"
        return f"{value} on the full {self.n_total} items ({how}) {op} {limit}"


@dataclass(frozen=True)
class TaskSpec:
    n_items: int
    higher_is_better: bool = True
    binary: bool = True  # every score is 0 or 1 (exact match); False for fractional scores (token F1)


@dataclass
class VariantStopper:
    """All floor tests of one variant. alpha: the variant's false-rejection probability, split evenly
    (Bonferroni) over the tests, so P(some floor wrongly rejects the variant) <= alpha."""

    tests: tuple[FloorTest, ...]
    alpha: float
    notes: tuple[str, ...] = field(default=())

    def decisions(
        self, scores: Mapping[str, Sequence[float]], reference: Mapping[str, Sequence[float]] | None = None
    ) -> list[Decision]:
        """Every test on the scores seen so far, in evaluation order per task. Non-inferiority tests
        use the differences to the reference's scores on the same items (the shared prefix)."""
        out = []
        for test in self.tests:
            values = scores.get(test.task)
            if values is None:
                continue
            if test.kind == "non_inferiority":
                ref = (reference or {}).get(test.task)
                if ref is None:
                    raise ValueError(f"{test.task}: non-inferiority needs the reference's scores")
                n = min(len(values), len(ref))
                values = np.asarray(values[:n], dtype=float) - np.asarray(ref[:n], dtype=float)
            out.append(test.decide(values))
        return out

    def check(
        self, scores: Mapping[str, Sequence[float]], reference: Mapping[str, Sequence[float]] | None = None
    ) -> Decision | None:
        """The first rejection after this round (a certain one first), or None: go on."""
        rejections = [d for d in self.decisions(scores, reference) if d.reject]
        return min(rejections, key=lambda d: not d.certain) if rejections else None


def floor_tests(
    *, rule: str, floors: Mapping[str, float], tasks: Mapping[str, TaskSpec], alpha: float, round_size: int,
    confidence: float = 0.95, ci_method: str = "exact", margins: Mapping[str, float] | None = None,
    default_margin: float = 0.05, non_inferiority_tasks: Iterable[str] | None = None, spending: str = "pocock",
) -> VariantStopper:  # fmt: skip
    """The tests of one variant under a policy's rule, with alpha split evenly across them.

    floors: task -> floor, as `effective_floors` gives them. non_inferiority_tasks: the tasks the
    reference measured (default: all of `tasks`); pass () for the reference itself, which passes."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    bounds.spent(1.0, alpha, spending)  # validates the name
    notes, specs = [], []
    floor_rule = "point" if rule == "non_inferiority" else rule
    for task, floor in sorted(floors.items()):
        if task not in tasks:
            notes.append(
                f"{task}: floor {100 * floor:.1f}% "
                + (
                    "applies to the weighted mix: judged on the full set only"
                    if task == WEIGHTED
                    else "names no task of the eval set"
                )
            )
            continue
        spec = tasks[task]
        t = full_set_threshold(
            floor_rule,
            floor,
            spec.n_items,
            higher_is_better=spec.higher_is_better,
            binary=spec.binary,
            confidence=confidence,
            ci_method=ci_method,
        )
        specs.append(
            dict(
                task=task,
                threshold=t,
                limit=floor,
                rule=floor_rule,
                higher_is_better=spec.higher_is_better,
                binary=spec.binary,
                n_total=spec.n_items,
            )
        )
    if rule == "non_inferiority":
        for task in sorted(tasks if non_inferiority_tasks is None else non_inferiority_tasks):
            spec, margin = tasks[task], (margins or {}).get(task, default_margin)
            specs.append(dict(task=task, threshold=-margin - EPS, limit=-margin, rule=rule, kind="non_inferiority",
                              higher_is_better=spec.higher_is_better, binary=False, n_total=spec.n_items))  # fmt: skip
    share = alpha / max(1, len(specs))
    tests = tuple(
        FloorTest(alpha=share, looks=planned_looks(s["n_total"], round_size), spending=spending, **s) for s in specs
    )
    if tests:
        notes.append(f"alpha {alpha:g} split over {len(tests)} tests: {share:.4g} each (Bonferroni)")
    return VariantStopper(tests, alpha, tuple(notes))


def floor_tests_for_policy(
    policy, tasks: Mapping[str, TaskSpec], alpha: float, round_size: int, **kwargs
) -> VariantStopper:
    """floor_tests from any object with PolicyConfig's fields (rule, floors, default_floor, margins,
    default_margin, confidence, ci_method): the floors are resolved the way the selection does."""
    floors = {}
    for task in sorted(set(tasks) | set(policy.floors)):
        floor = policy.floors.get(task, None if task == WEIGHTED else policy.default_floor)
        if floor is not None:
            floors[task] = floor
    return floor_tests(rule=policy.rule, floors=floors, tasks=tasks, alpha=alpha, round_size=round_size,
                       confidence=policy.confidence, ci_method=policy.ci_method, margins=policy.margins,
                       default_margin=policy.default_margin, **kwargs)  # fmt: skip
