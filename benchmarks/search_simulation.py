"""The adaptive search simulation's machinery: simulated ladders and eval sets, the full-set
verdict computed independently of the search code, and the real FloorTests and SearchDriver run on
them. benchmarks/adaptive_simulation.py (error rates, work saved) and benchmarks/sibling_rule.py
(the sibling rule) both drive it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from selector.search import bounds
from selector.search.candidates import Candidate, Outcome, Shortfall
from selector.search.driver import SearchDriver
from selector.search.sequential import FloorTest, TaskSpec, floor_tests
from selector.search.thresholds import EPS
from selector.stats import clopper_pearson_interval, mean_interval, wilson_interval

SEED = 20240614
ROUND_SIZE = 12
ALPHAS = (0.01, 0.05, 0.10)
SIZES = (40, 48, 60, 80, 100, 120, 150, 200)
WORKERS = (1, 2, 4)
SIBLING_MARGIN = 0.15  # search.sibling_margin's default (docs/search.md)
CHECK_EVERY = 10  # every 10th sweep: the target variant's early rejection through FloorTest.decide itself
# The ladder: parameters (billions) and logit ability of each model; bytes per parameter and the
# logit cost of each precision (int4 also costs a calibration pass). Costs in seconds, stated
# assumptions: loading 10 s + 4 s per GB, int4 calibration 90 s per billion parameters, int8 5 s,
# one item 0.05 s + 0.25 s per billion parameters.
MODELS = (("m135M", 0.135, -1.6), ("m360M", 0.36, -0.6), ("m0.5B", 0.5, 0.2), ("m1.5B", 1.5, 1.2))
PRECISIONS = (("bf16", 2.0, 0.0, 0.0), ("int8", 1.15, -0.05, 5.0), ("int4", 0.7, -0.35, 90.0))


@dataclass
class Variant:
    name: str
    model: str
    params: float
    planned_gb: float
    measured_gb: float
    precision: str
    setup_s: float
    item_s: float


def ladder(rng: np.random.Generator) -> tuple[list[Variant], np.ndarray]:
    variants, ability = [], []
    for model, params, skill in MODELS:
        model_skill = skill + rng.normal(0, 0.4)
        for precision, bpp, drop, calib in PRECISIONS:
            gb = params * bpp
            variants.append(Variant(f"{model}/{precision}", model, params, gb, gb * (1 + rng.uniform(-0.02, 0.02)),
                                    precision, 10 + 4 * gb + calib * (params if precision == "int4" else 1.0),
                                    0.05 + 0.25 * params))  # fmt: skip
            ability.append(model_skill + drop + rng.normal(0, 0.1 if precision == "int4" else 0.02))
    return variants, np.array(ability)


def populations(rng, ability: np.ndarray, n_items: int, binary: bool, stress: bool = False) -> np.ndarray:
    """variants x items scores; items share a difficulty, precisions of a model share their luck.

    stress: quantization also moves each task's ability on its own (normal, sd 0.3 logits) and, for
    0/1 scores, re-draws the luck of a share of the items (2-30%, as 1.6-26% of answers flipped in
    the README's grid), so a quantized copy can beat its baseline on a task (the sibling rule's risk)."""
    difficulty = rng.normal(0, 1.5, n_items) + rng.normal(0, 0.5)
    quantized = np.tile([precision != "bf16" for precision, *_ in PRECISIONS], len(MODELS))
    shift = np.where(quantized, rng.normal(0, 0.3, quantized.size), 0.0) if stress else np.zeros(quantized.size)
    p = 1 / (1 + np.exp(-(ability[:, None] + shift[:, None] - difficulty[None, :])))
    if binary:
        luck = np.repeat(rng.random((len(MODELS), n_items)), len(PRECISIONS), axis=0)
        if stress:
            share = np.where(quantized, rng.uniform(0.02, 0.30, quantized.size), 0.0)
            luck = np.where(rng.random(luck.shape) < share[:, None], rng.random(luck.shape), luck)
        return (luck < p).astype(float)
    return np.clip(p + rng.normal(0, 0.2, p.shape), 0, 1).round(3)


@lru_cache(maxsize=None)
def exact_low(successes: float, n: int, confidence: float) -> float:
    return clopper_pearson_interval(successes, n, confidence)[0]


def lower_end(scores: np.ndarray, binary: bool) -> float:
    """The selection's own interval under the default ci_method (selector.stats.mean_interval, as
    select() computes it): Clopper-Pearson on the score sum, for 0/1 and fractional scores."""
    if binary:
        return exact_low(round(float(scores.sum()), 9), scores.size, 0.95)
    return mean_interval(scores, False, 0.95, "exact")[0]


def full_set_passes(scores: np.ndarray, floor: float, rule: str, binary: bool) -> np.ndarray:
    """The selection's own rule on the full set (not the search's thresholds)."""
    if rule == "point":
        return scores.mean(axis=1) >= floor - EPS
    return np.array([lower_end(row, binary) >= floor - EPS for row in scores])


def boundary_floor(scores: np.ndarray, rule: str, binary: bool) -> float:
    """The floor that puts a full set exactly on the threshold."""
    return float(scores.mean()) if rule == "point" else lower_end(scores, binary)


def rejection_round(test: FloorTest, scores: np.ndarray) -> np.ndarray:
    """Per variant (rows), the first look at which the test rejects; -1 when it never does."""
    looks = np.array(test.looks)
    sums = np.cumsum(scores, axis=1)[:, looks - 1]
    if test.binary:
        crit = np.array(bounds.critical_counts(test.n_total, test.good_needed, test.looks, test.levels))
        reject = sums <= crit
    else:
        stakes = bounds.bets(scores, test.target, test.n_total)
        wealth = np.maximum.accumulate(bounds.log_capital(scores, test.target, stakes, test.n_total), axis=1)
        # the betting test at the interim looks only: at N the full set decides (FloorTest.decide)
        betting = (wealth[:, looks - 1] >= math.log(1 / test.alpha)) & (looks < test.n_total)
        reject = betting | ((sums + test.n_total - looks) / test.n_total < test.target)
    return np.where(reject.any(axis=1), reject.argmax(axis=1), -1)


def decided_round(test: FloorTest, row: np.ndarray) -> int:
    """The same through the real decision code: FloorTest.decide at every look, as the evaluation
    loop calls it; the vectorized rejection_round is checked against it on a sample of variants."""
    for k, n in enumerate(test.looks):
        if test.decide(row[:n]).reject:
            return k
    return -1


def draw_sweep(rng: np.random.Generator, stress: bool = False) -> dict:
    variants, ability = ladder(rng)
    sizes = rng.choice(SIZES, 3)
    binary = rng.random(3) >= 0.25
    rule = str(rng.choice(["point", "lower_bound"]))
    alpha = float(rng.choice(ALPHAS))
    boundary = bool(rng.random() < 1 / 3)
    scores = [populations(rng, ability, int(n), bool(b), stress) for n, b in zip(sizes, binary)]
    target = int(rng.integers(len(variants)))
    floors = {}
    for j, s in enumerate(scores):
        if boundary:
            floors[f"t{j}"] = boundary_floor(s[target], rule, bool(binary[j]))
        else:  # what a user might ask: up to 20 points under the best variant, in steps of 5
            best = float(s.mean(axis=1).max())
            floors[f"t{j}"] = float(np.clip(np.floor((best - rng.uniform(0, 0.2)) * 20) / 20, 0.05, 0.95))
    orders = [rng.permutation(len(s[0])) for s in scores]  # one order per task, shared by every variant
    return dict(variants=variants, sizes=sizes, binary=binary, rule=rule, alpha=alpha, boundary=boundary,
                scores=scores, floors=floors, target=target, orders=orders)  # fmt: skip


def judge(sweep: dict, spending: str, check: bool = False) -> dict:
    """Full-set verdicts and, per variant, the round and items at which early rejection stops it."""
    tasks = {f"t{j}": TaskSpec(int(n), binary=bool(b)) for j, (n, b) in enumerate(zip(sweep["sizes"], sweep["binary"]))}
    stopper = floor_tests(rule=sweep["rule"], floors=sweep["floors"], tasks=tasks, alpha=sweep["alpha"],
                          round_size=ROUND_SIZE, spending=spending)  # fmt: skip
    n_var = len(sweep["variants"])
    eligible = np.ones(n_var, bool)
    stop = np.full(n_var, 10**6)
    passes = {}
    for j, (test, scores) in enumerate(zip(stopper.tests, sweep["scores"])):
        passes[f"t{j}"] = full_set_passes(scores, sweep["floors"][f"t{j}"], sweep["rule"], bool(sweep["binary"][j]))
        eligible &= passes[f"t{j}"]
        first = rejection_round(test, scores[:, sweep["orders"][j]])
        if check:  # the target variant through FloorTest.decide itself
            row = scores[sweep["target"], sweep["orders"][j]]
            assert decided_round(test, row) == first[sweep["target"]], "vectorized test differs from decide()"
        stop = np.where(first >= 0, np.minimum(stop, first), stop)
    total = int(sum(sweep["sizes"]))
    items_at = np.array(
        [sum(min((r + 1) * ROUND_SIZE, int(n)) for n in sweep["sizes"]) for r in np.minimum(stop, 10**3)]
    )
    items = np.where(stop < 10**6, np.minimum(items_at, total), total)
    return dict(eligible=eligible, stopped=(stop < 10**6) & (items < total), items=items, total=total,
                stop_round=stop, passes=passes, stopper=stopper)


def shortfall(sweep: dict, verdict: dict, i: int, stopped: bool) -> Shortfall | None:
    """What the sweep's outcome_of hands the driver for variant i, stopped early or rejected."""
    scores = {f"t{j}": s[i, sweep["orders"][j]] for j, s in enumerate(sweep["scores"])}
    look = (int(verdict["stop_round"][i]) + 1) * ROUND_SIZE if stopped else None
    return baseline_shortfall(verdict["stopper"], scores, look, sweep["floors"],
                              {t: bool(p[i]) for t, p in verdict["passes"].items()})


def search(sweep: dict, verdict: dict, workers: int, baseline_first: bool = True,
           sibling_margin: float | None = SIBLING_MARGIN, fidelity: bool = True) -> dict:
    """Drive the real SearchDriver with the simulated outcomes; costs per run and per wave.
    With fidelity (the default) a sibling that runs before its model's baseline has written the
    reference loads the baseline once more in its preparation (10 s + 4 s per GB, as any load).
    sibling_margin: the rule of search.sibling_margin (None: off)."""
    variants = sweep["variants"]
    by_name = {v.name: i for i, v in enumerate(variants)}
    cands = [Candidate(v.name, v.planned_gb, v.model, needs_quantization=v.precision != "bf16",
                       is_baseline=v.precision == "bf16") for v in variants]  # fmt: skip
    baseline_gb = {v.model: v.measured_gb for v in variants if v.precision == "bf16"}
    driver = SearchDriver(cands, workers=workers, baseline_first=baseline_first, sibling_margin=sibling_margin)
    cost = wall = 0.0
    referenced: set[str] = set()  # models whose reference is cached
    baseline_loads = 0
    while not driver.done:
        wave = driver.next_wave()
        wave_cost = []
        for name in wave.names:
            i = by_name[name]
            v = variants[i]
            failing_baseline = v.precision == "bf16" and not verdict["eligible"][i] and sibling_margin is not None
            if verdict["stopped"][i] and not wave.full:
                short = shortfall(sweep, verdict, i, stopped=True) if failing_baseline else None
                outcome = Outcome("stopped", items=int(verdict["items"][i]), shortfall=short)
            elif verdict["eligible"][i]:
                outcome = Outcome("eligible", measured=v.measured_gb, items=verdict["total"])
            else:
                short = shortfall(sweep, verdict, i, stopped=False) if failing_baseline else None
                outcome = Outcome("rejected", items=verdict["total"], shortfall=short)
            run_cost = v.setup_s + outcome.items * v.item_s
            if v.precision == "bf16":
                baseline_loads += 1
            elif fidelity and v.model not in referenced:
                run_cost += 10 + 4 * baseline_gb[v.model]
                baseline_loads += 1
            wave_cost.append(run_cost)
            driver.report(name, outcome)
        referenced |= {variants[by_name[n]].model for n in wave.names}  # after the wave: no sharing within it
        cost, wall = cost + sum(wave_cost), wall + max(wave_cost)
    counts = driver.counts()
    skipped = [n for n, st in driver.states.items() if st.pruned_by == "sibling"]
    return dict(best=driver.best, materialized=counts["materialized"], items=counts["items"], cost=cost, wall=wall,
                baseline_loads=baseline_loads, skipped=skipped)  # fmt: skip


def grid(sweep: dict, verdict: dict, workers: int) -> dict:
    variants = sweep["variants"]
    order = sorted(range(len(variants)), key=lambda i: variants[i].planned_gb)
    costs = [variants[i].setup_s + verdict["total"] * variants[i].item_s for i in order]
    wall = sum(max(costs[k : k + workers]) for k in range(0, len(costs), workers))
    eligible = [i for i in range(len(variants)) if verdict["eligible"][i]]
    best = min(eligible, key=lambda i: variants[i].measured_gb) if eligible else None
    return dict(best=variants[best].name if best is not None else None, materialized=len(variants),
                items=verdict["total"] * len(variants), cost=sum(costs), wall=wall)  # fmt: skip


def rate(hits: int, n: int) -> dict:
    high = wilson_interval(hits, n, 0.95)[1] if n else None
    return {"n": n, "hits": hits, "rate": hits / n if n else None, "upper_95": high}


def exact_boundary_table() -> list[dict]:
    """Exact false-rejection probability at the boundary population (the chain over the looks)."""
    rows = []
    for n_items in (40, 100, 200):
        for alpha in (0.01 / 3, 0.05 / 3, 0.10 / 3):
            test = floor_tests(rule="point", floors={"t": 0.6}, tasks={"t": TaskSpec(n_items)}, alpha=alpha,
                               round_size=ROUND_SIZE).tests[0]  # fmt: skip
            crit = bounds.critical_counts(test.n_total, test.good_needed, test.looks, test.levels)
            p = bounds.rejection_probability(test.n_total, test.good_needed, test.looks, crit)
            rows.append({"n_items": n_items, "floor": 0.6, "alpha_per_test": alpha, "exact_false_rejection": p})
    return rows


def count(tally: dict, key: str, hits: int, n: int) -> None:
    hit, total = tally.get(key, (0, 0))
    tally[key] = (hit + hits, total + n)


def baseline_shortfall(stopper, scores: dict[str, np.ndarray], look: int | None, floors: dict[str, float],
                       rule_passes: dict[str, bool]) -> Shortfall | None:  # type: ignore[no-untyped-def]
    """What the sweep's outcome_of gives the driver for a baseline: the stopping decision's bound
    (the real VariantStopper on the prefixes at the stopping look), or for a full-set rejection the
    largest miss by the full-set score; None when neither is a floor's."""
    if look is not None:
        decision = stopper.check({t: s[:look] for t, s in scores.items()})
        if decision is None or decision.floor is None:
            return None
        return Shortfall(decision.task, decision.bound, decision.floor)
    misses = [Shortfall(t, float(s.mean()), floors[t], anytime=False) for t, s in scores.items()
              if t in floors and not rule_passes[t]]  # fmt: skip
    return max(misses, key=lambda m: m.gap) if misses else None
