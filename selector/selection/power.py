"""What a verdict can tell apart at the eval set's size (issue 36, points 3 and 4).

Three figures, each exact for 0/1 scores (a sum over every count or every paired table, through
the same intervals and tests the selection decides with):

- `pass_chance`: P(a variant whose true accuracy is `truth` passes a floor) under the rule, at n
  items. Under `point` a variant truly a margin below the floor passes often at tens of items (27%
  at 5 points under a 60% floor with 48 items); the report prints it next to the verdict.
- `truth_to_pass`: the true accuracy a variant needs to pass the floor with 80% probability (under
  `lower_bound` about 79% for a 60% floor at 48 items): the rule's minimum detectable effect.
- `detectable_margin` / `items_needed`: the smallest non-inferiority margin that a variant truly
  equal to the reference is shown within with 80% probability, and the items a margin needs. For
  0/1 scores it depends on how many answers flip (the discordance): none flip -> a fixed interval
  (-7.4 points at 48 items: a 5-point margin cannot be shown at all); 10% flip -> wider. Exact
  over every table (Tango's interval and the exact test, as the selection's check) up to
  EXACT_MAX_N items; above, exact over every table for Tango's interval alone (summed by the count
  of items flipping), never a normal approximation: a Wald standard error of the observed flips
  vanishes with them, and put "identical answers at 251 items" within 0.02 points where Tango's
  interval reaches -1.5 (issue 50). For fractional scores only identical scores are computed (the
  betting interval of a zero difference), the best case.

Pure functions over numbers and a policy; nothing here reads records but `rows`, which the
selection calls.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
from scipy.special import gammaln, xlogy

from selector.stats import mean_interval

POWER = 0.8
# Above EXACT_MAX_N the exact test's p of every table is too many to compute: the power is Tango's interval's
# alone, exact for it. The exact test, which the check also asks for, takes about 0.02-0.05 points more at 250
# items (identical answers: 1.54 instead of 1.51 points; 10% flipping: 5.93 instead of 5.88) and less above it
# (identical answers at 400 items: 0.96 instead of 0.95).
EXACT_MAX_N = 250
ASSUMED_DISCORDANCE = 0.10  # before anything runs: a tenth of the answers flipping, as 4-bit copies of small models do
EPS = 1e-9  # the selection's tolerance (selection.checks.EPS)


@lru_cache(maxsize=512)
def least_passing(rule: str, floor: float, n: int, confidence: float, ci_method: str) -> int | None:
    """The least count of n 0/1 scores whose mean passes `floor` (higher is better) under the rule,
    by the selection's own interval; None when no count does (non_inferiority's floors are point
    checks)."""
    def passes(k: int) -> bool:
        if rule != "lower_bound":
            return k / n >= floor - EPS
        low, _, _ = mean_interval(np.r_[np.ones(k), np.zeros(n - k)], True, confidence, ci_method)
        return low >= floor - EPS

    lo, hi = 0, n + 1  # passing grows with k
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if mid <= n and passes(mid) else (mid + 1, hi)
    return lo if lo <= n else None


def pass_chance(rule: str, truth: float, floor: float, n: int, confidence: float = 0.95,
                ci_method: str = "exact") -> float:
    """P(a variant truly at `truth` passes `floor` under the rule), 0/1 scores, n items. For a
    ceiling (lower is better) pass 1 - truth and 1 - floor: every interval here is symmetric."""
    from scipy.stats import binom  # where it is used, as in selector/stats.py

    k = least_passing(rule, round(floor, 12), n, confidence, ci_method)
    return 0.0 if k is None else float(binom.sf(k - 1, n, min(max(truth, 0.0), 1.0)))


def truth_to_pass(rule: str, floor: float, n: int, confidence: float = 0.95, ci_method: str = "exact",
                  power: float = POWER) -> float | None:
    """The true accuracy a variant needs to pass `floor` with probability `power`; None when no
    count of n passes (the rule cannot be met at this size)."""
    from scipy.optimize import brentq
    from scipy.stats import binom

    k = least_passing(rule, round(floor, 12), n, confidence, ci_method)
    if k is None:
        return None
    if k == 0:
        return 0.0
    return float(brentq(lambda p: binom.sf(k - 1, n, p) - power, 1e-12, 1 - 1e-12))


# ---- non-inferiority ----------------------------------------------------------------------


@lru_cache(maxsize=2048)
def ni_power(margin: float, n: int, confidence: float, discordance: float) -> float:
    """P(non-inferiority is declared at `margin`) for 0/1 scores of a variant truly equal to the
    reference, `discordance` of the items flipping (half each way): exact over every table for
    n <= EXACT_MAX_N (Tango's lower end >= -margin and the exact test's p <= alpha / 2, as
    selection.checks.non_inferiority_check), else exact for Tango's lower end alone (tango_power)."""
    from scipy.stats import norm

    from selector.stats_paired import exact_p_table, tango_scores

    alpha = (1 - confidence) / 2
    z = float(norm.ppf(1 - alpha))
    if margin >= 1:
        return 1.0
    if n > EXACT_MAX_N:
        return tango_power(margin, n, z, discordance)
    tables, pvalues = exact_p_table(n, round(margin, 12))
    keys = np.array(list(tables), dtype=int)
    gained, lost = keys[:, 0], keys[:, 1]
    p = pvalues[np.fromiter(tables.values(), dtype=int, count=len(tables))]
    declared = (tango_scores(gained, lost, n, -margin) >= z - 1e-9) & (p <= alpha + EPS)
    half = discordance / 2
    log_prob = (gammaln(n + 1) - gammaln(gained + 1) - gammaln(lost + 1) - gammaln(n - gained - lost + 1)
                + xlogy(gained, half) + xlogy(lost, half) + xlogy(n - gained - lost, 1 - discordance))  # fmt: skip
    return float(np.exp(log_prob[declared]).sum())


def tango_power(margin: float, n: int, z: float, discordance: float) -> float:
    """P(Tango's lower end >= -margin) at n items for a truly equal variant, `discordance` of the
    items flipping (half each way), exactly over every table and cheap at any n: of k flipping items
    the gained ones are Binomial(k, 1/2), and the statistic grows with them at a fixed k, so the
    interval clears the margin from a least count on (found for every k at once by bisection).
    Identical answers (no flips) are the one table (0, 0): the power steps from 0 to 1 where Tango's
    interval of a zero difference, z^2 / (n + z^2), reaches the margin."""
    from scipy.stats import binom

    from selector.stats_paired import tango_scores

    k = np.arange(n + 1)
    weight = binom.pmf(k, n, min(max(discordance, 0.0), 1.0))
    k, weight = k[weight > 1e-18], weight[weight > 1e-18]  # what is dropped weighs under n * 1e-18
    lo, hi = np.zeros_like(k), k + 1  # the least gained count that clears, k + 1 when none does
    while np.any(lo < hi):
        mid = (lo + hi) // 2
        clears = (mid <= k) & (tango_scores(np.minimum(mid, k), k - np.minimum(mid, k), n, -margin) >= z - 1e-9)
        lo, hi = np.where(clears | (lo >= hi), lo, mid + 1), np.where(clears & (lo < hi), mid, hi)
    return float(min(1.0, np.sum(weight * binom.sf(lo - 1, k, 0.5))))


@lru_cache(maxsize=256)
def _identical_fractional(n: int, confidence: float) -> float:
    """How far below 0 the lower end of the difference of n identical fractional scores lies."""
    from selector.stats_paired import paired_fractional

    low, _, _ = paired_fractional(np.zeros(n), confidence)
    return -low


def detectable_margin(n: int, confidence: float = 0.95, binary: bool = True,
                      discordance: float = ASSUMED_DISCORDANCE, power: float = POWER) -> float:
    """The smallest margin a variant truly equal to the reference is shown within with probability
    `power` at n items (0/1 scores at `discordance`; fractional: identical scores)."""
    if not binary:
        return _identical_fractional(n, confidence)
    lo, hi = 0.0, 1.0
    for _ in range(12):  # to 0.03 points
        mid = round((lo + hi) / 2, 6)
        lo, hi = (lo, mid) if ni_power(mid, n, confidence, discordance) >= power else (mid, hi)
    return hi


def items_needed(margin: float, confidence: float = 0.95, binary: bool = True,
                 discordance: float = ASSUMED_DISCORDANCE, power: float = POWER, most: int = 100_000) -> int | None:
    """About how many items a margin needs for a truly equal variant to be shown within it with
    probability `power` (the least n found by bisection; None: more than `most`)."""
    def enough(n: int) -> bool:
        return detectable_margin(n, confidence, binary, discordance, power) <= margin + EPS if not binary \
            else ni_power(round(margin, 6), n, confidence, discordance) >= power  # fmt: skip

    if not enough(most):
        return None
    lo, hi = 1, most
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid + 1, hi)
    return lo


# ---- what the report and the preflight say ------------------------------------------------


def rows(policy: Any, tasks: dict[str, tuple], discordance: dict[str, float] | None = None  # type: ignore[type-arg]
         ) -> list[dict[str, Any]]:
    """Per task with a floor or a margin: n, and what the rule can tell apart there.

    tasks: task -> (items, binary[, higher_is_better]); a ceiling (lower is better) is read as the
    floor 1 - ceiling on 1 - score, and truth_to_pass is then the most the score may truly be.
    discordance: task -> the observed share of items flipping between the winner and the reference
    (non_inferiority), else ASSUMED_DISCORDANCE."""
    from selector.selection.checks import effective_floors

    out = []
    floors = effective_floors(policy, list(tasks))
    floor_rule = "point" if policy.rule == "non_inferiority" else policy.rule
    for task, (n, binary, *direction) in sorted(tasks.items()):
        higher = direction[0] if direction else True
        if n <= 0:
            continue
        gap = policy.margins.get(task, policy.default_margin)
        row: dict[str, Any] = {"task": task, "n": n, "rule": policy.rule}
        floor = floors.get(task)
        if floor is not None:
            oriented = floor if higher else 1 - floor
            need = truth_to_pass(floor_rule, oriented, n, policy.confidence, policy.ci_method)
            below = pass_chance(floor_rule, oriented - gap, oriented, n, policy.confidence, policy.ci_method)
            row.update(floor=floor, gap=gap, higher_is_better=higher, passes_below=below,
                       truth_to_pass=need if need is None or higher else 1 - need)
        if policy.rule == "non_inferiority":
            flips = (discordance or {}).get(task, ASSUMED_DISCORDANCE)
            best = detectable_margin(n, policy.confidence, binary, 0.0)
            row.update(margin=gap, identical=best, discordance=flips if binary else None,
                       detectable=detectable_margin(n, policy.confidence, binary, flips) if binary else best,
                       needed=items_needed(gap, policy.confidence, binary, flips if binary else 0.0))
        if len(row) > 3:
            out.append(row)
    return out


def _pct(x: float) -> str:  # 0.3% of answers flipping is not "0%"
    return f"{100 * x:.1f}%" if x < 0.1 else f"{100 * x:.0f}%"


def verdict_note(policy: Any, table: list[dict[str, Any]]) -> str:
    """One sentence for next to the verdict: what this rule risks or needs at these sizes."""
    if not table:
        return ""
    if policy.rule == "non_inferiority" and any("margin" in r for r in table):
        worst = max(table, key=lambda r: r["detectable"] - r["margin"])
        needed = f"about {worst['needed']} items" if worst["needed"] else "more items than can be computed"
        flips = (f"with {_pct(worst['discordance'])} of answers flipping" if worst.get("discordance") is not None
                 else "for identical fractional scores")
        return (f"Minimum detectable margin ({100 * policy.confidence:.0f}% confidence, {POWER:.0%} power): "
                f"{worst['task']} ({worst['n']} items) shows a truly equal variant within {100 * worst['detectable']:.1f} "
                f"points {flips} (at best, identical answers: {100 * worst['identical']:.1f}); the "
                f"{100 * worst['margin']:.1f}-point margin needs {needed}.")
    floored = [r for r in table if "floor" in r]
    if not floored:
        return ""

    def one(r: dict[str, Any]) -> str:
        kind, edge = ("floor", "from") if r["higher_is_better"] else ("ceiling", "up to")
        need = (f", passed 80% of the time {edge} a true {100 * r['truth_to_pass']:.0f}%)"
                if r["truth_to_pass"] is not None else ", which no result can pass)")
        return f"{r['task']} {_pct(r['passes_below'])} ({r['n']} items, {kind} {100 * r['floor']:.0f}%{need}"

    each = "; ".join(one(r) for r in floored)
    gaps = {r["gap"] for r in floored}
    gap = f"{100 * gaps.pop():.0f} points" if len(gaps) == 1 else "its margin (policy.margins)"
    where = "below a floor" + (" (above a ceiling)" if not all(r["higher_is_better"] for r in floored) else "")
    said = (f"Rule {policy.rule} at these sizes: a variant truly {gap} {where} would pass it with probability "
            f"{each}.")
    if policy.rule == "point":
        said += (f" policy.rule=lower_bound keeps that chance under {(1 - policy.confidence) / 2:.1%} per floor (and "
                 "with policy.winner_control=fixed_sequence, for the recommended variant among several).")
    return said


def preflight_lines(policy: Any, tasks: dict[str, tuple]) -> list[str]:  # type: ignore[type-arg]
    """Before anything loads: the rule cannot be met at this size, or only with low power."""
    out = []
    for row in rows(policy, tasks):
        task, n = row["task"], row["n"]
        if "floor" in row and row["truth_to_pass"] is None:
            out.append(f"{task}: no result on its {n} items can pass the {row['floor']:.0%} floor under rule "
                       f"{policy.rule} at confidence {policy.confidence:g}: every variant will fail it "
                       "(lower the floor, use rule=point, or add items)")
        if policy.rule != "non_inferiority":
            continue
        margin = row["margin"]
        needed = f"about {row['needed']} items" if row["needed"] else "more items than can be computed"
        if row["identical"] > margin + EPS:
            out.append(f"{task}: the {100 * margin:.1f}-point non-inferiority margin cannot be met with its {n} items: "
                       f"even a variant whose answers equal the reference's on every item is shown within "
                       f"{100 * row['identical']:.1f} points at best. It needs {needed} for {POWER:.0%} power"
                       + (f" when {_pct(row['discordance'])} of answers flip" if row["discordance"] is not None
                          else "") + f"; or set policy.margins.{task} to at least {100 * row['detectable']:.1f} points")
        elif row["detectable"] > margin + EPS:
            out.append(f"{task}: the {100 * margin:.1f}-point non-inferiority margin is detectable with {POWER:.0%} power "
                       f"only from {100 * row['detectable']:.1f} points at {n} items when "
                       f"{_pct(row['discordance'])} of answers flip: a variant equal to the reference often fails "
                       f"it. It needs {needed}")
    return out
