"""Verdicts at the edges, through the real decision code (issue 22, point 7).

Every figure comes from the code a sweep runs: the evaluation loop (`selector.variant.evaluation.run`)
with the policy's real stopper (`floor_tests_for_policy`) for early rejection, and `select()` for
the full-set verdict, the intervals and the winner. Nothing here re-implements a decision. The eval
set is the default one's shape: sentiment 48, extraction 48, arithmetic 48, code 42 items, with
its floors (80/70/60/50%); "fractional" makes extraction token-F1-like.

1. False rejection at the boundary: each task's full set sits exactly where `select()` still
   passes it under the rule (found by searching with `select()` itself; under non_inferiority
   against a reference right on every item, with a 15-point margin: 48 items cannot show 5, and
   at 10 only identical scores pass);
   the share of random item orders in which the stopper rejects it anyway (nominal: search.alpha
   = 5%).
2. Coverage of every interval the decision uses, at n = 42 and 48: P(its lower end lies above
   the true mean) for Wilson and the bootstrap (exact over every count for 0/1 scores, simulated
   for fractional ones), and P(non-inferiority is declared) at a true difference of exactly -5
   points through the selection's own check (exact for 0/1 scores) (nominal: (1 - confidence) / 2
   = 2.5%).
3. The winner's error: a ladder of six variants around the floors, items drawn from known
   accuracies; P(the recommended variant truly misses a floor) under lower_bound, without and with
   `winner_control: fixed_sequence` (nominal: 2.5%), and what the sequence costs; (a) the same with
   a memory limit the largest variant misses (benchmarks/verdict_sequence.py).
4. (b) The `+sweep=qwen` ladder under fixed_sequence: the search and select() walk one order
   (benchmarks/verdict_sequence.py).
5. (c) The chance a variant 5 or 10 points under a floor passes, at n = 24 / 48 / 100, per rule,
   exact through select(); the worst case of each interval over p (exact); non-inferiority for a
   variant truly equal to the reference (exact at n = 48).

    python -m benchmarks.verdict_edges            # a few minutes on one core
    python -m benchmarks.verdict_edges --quick
    python -m benchmarks.verdict_edges --out benchmarks/results/verdict_edges_before_36 --label "..."

Writes benchmarks/results/verdict_edges.{json,md}. Runs against any checkout that has these
functions (the issue's "before" figures came from the same script on the commit before the fix).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from scipy.special import gammaln, xlogy

from benchmarks import verdict_sequence as sequence
from benchmarks.common import RESULTS_DIR
from benchmarks.tables import markdown_table
from selector.config import PolicyConfig
from selector.search.sequential import TaskSpec, floor_tests_for_policy
from selector.selection import select
from selector.variant import evaluation
from selector.records import MemoryResult, RunRecord, SampleRecord, TaskResult, Variant

SEED = 20261202
SIZES = {"sentiment": 48, "extraction": 48, "arithmetic": 48, "code": 42}
FLOORS = {"sentiment": 0.80, "extraction": 0.70, "arithmetic": 0.60, "code": 0.50}
RULES = {"point": dict(rule="point"), "lower_bound wilson": dict(rule="lower_bound", ci_method="wilson"),
         "lower_bound bootstrap": dict(rule="lower_bound", ci_method="bootstrap"),
         "non_inferiority, 15-point margin": dict(rule="non_inferiority", default_margin=0.15)}  # fmt: skip
EXACT = {"lower_bound exact (the default ci_method)": dict(rule="lower_bound", ci_method="exact")}  # after RULES
REFERENCE = {t: np.ones(n) for t, n in SIZES.items()}  # a reference right on every item (the largest model)


def record(name: str, scores: dict[str, np.ndarray], fractional: bool, params: float = 1e9) -> RunRecord:
    tasks = {}
    for task, s in scores.items():
        metric = "f1" if fractional and task == "extraction" else "exact_match"
        tasks[task] = TaskResult(task=task, metric=metric, value=float(np.mean(s)), ci_low=0.0, ci_high=1.0,
                                 n=len(s), ci_method="bootstrap" if metric == "f1" else "wilson",
                                 item_scores={f"{task}-{i}": float(v) for i, v in enumerate(s)})  # fmt: skip
    model, precision = name.split("/")
    return RunRecord(key=name, variant=Variant(model=model, precision=precision, params=int(params)),
                     status="completed", tasks=tasks, memory=MemoryResult(weight_bytes=int(params * 2)))  # fmt: skip


def policy(rule: str) -> PolicyConfig:
    return PolicyConfig(floors=dict(FLOORS), **{**RULES, **EXACT}[rule])


def passes(scores: dict[str, np.ndarray], rule: str, fractional: bool) -> bool:
    """select() recommends the variant over the (larger) reference: it passes every check."""
    records = [record("m/int8", scores, fractional), record("big/bf16", REFERENCE, fractional, params=1e10)]
    return select(records, policy(rule)).winner == "m/int8"


def boundary_population(rule: str, fractional: bool, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Per task, the lowest full set that select() still passes: 0/1 scores by count; fractional
    scores (extraction) by scaling a token-F1-like shape until it just passes."""
    out = {t: np.ones(n) for t, n in SIZES.items()}
    shape = np.where(rng.random(48) < 0.45, 1.0, rng.random(48))
    for task, n in SIZES.items():
        if fractional and task == "extraction":
            lo, hi = 0.0, 1.0 / shape.min()  # at hi every score is 1: passes
            for _ in range(40):  # the least scale that passes (passing grows with the scale)
                mid = (lo + hi) / 2
                out[task] = np.clip(shape * mid, 0, 1)
                lo, hi = (lo, mid) if passes(out, rule, fractional) else (mid, hi)
            out[task] = np.clip(shape * hi, 0, 1)
            continue
        k = n
        while k > 0:
            out[task] = np.r_[np.ones(k - 1), np.zeros(n - k + 1)]
            if not passes(out, rule, fractional):
                break
            k -= 1
        out[task] = np.r_[np.ones(k), np.zeros(n - k)]
    assert passes(out, rule, fractional)
    return out


def false_rejection(rule: str, fractional: bool, draws: int, rng: np.random.Generator) -> dict[str, float]:
    """Share of item orders in which the real evaluation loop stops a variant select() passes."""
    pop = boundary_population(rule, fractional, rng)
    specs = {t: TaskSpec(n, True, not (fractional and t == "extraction")) for t, n in SIZES.items()}
    stopper = floor_tests_for_policy(policy(rule), specs, 0.05, 12)
    tasks = sequence._tasks(SIZES)
    stopped = 0
    for _ in range(draws):
        def score(task, ids):  # type: ignore[no-untyped-def]
            return [SampleRecord(task=task.name, id=i, prompt="", output="", target="",
                                 score=float(pop[task.name][int(i.rsplit("-", 1)[1])])) for i in ids]  # fmt: skip
        reference = {t: list(s) for t, s in REFERENCE.items()}  # all ones: the same in any order
        out = evaluation.run(tasks, sequence.MemoryStore(), score, seed=int(rng.integers(2**31)), round_size=12, stopper=stopper,
                             reference=reference)  # fmt: skip
        stopped += out.decision is not None
    return {"rate": stopped / draws, "draws": draws, "means": {t: float(p.mean()) for t, p in pop.items()}}


def _result(scores: np.ndarray, metric: str) -> TaskResult:
    return TaskResult(task="t", metric=metric, value=float(np.mean(scores)), ci_low=0, ci_high=1, n=len(scores),
                      item_scores={str(i): float(v) for i, v in enumerate(scores)})  # fmt: skip


def interval_coverage(draws: int, rng: np.random.Generator) -> list[dict[str, object]]:
    """P(the decision's lower end > the true mean), each interval through the selection's own
    functions (evidence.task_interval, paired_diff and non_inferiority_check): exact over every
    count for 0/1 scores, simulated for fractional ones."""
    from scipy.stats import binom

    from selector.selection.checks import non_inferiority_check
    from selector.selection.evidence import Evidence, paired_diff, task_interval

    from selector.selection.checks import CI_METHODS

    rows = []
    for n in (42, 48):
        for p in (0.5, 0.6, 0.7, 0.8, 0.9):
            for method in CI_METHODS:  # exact (Clopper-Pearson) where the checkout has it
                above = sum(binom.pmf(k, n, p) for k in range(n + 1)
                            if task_interval(_result(np.r_[np.ones(k), np.zeros(n - k)], "exact_match"), 0.95, method,
                                             2000, 0).low > p)  # fmt: skip
                rows.append({"interval": f"{method}, 0/1 scores (exact)", "n": n, "truth": p, "above": float(above)})
        for mean in (0.6, 0.75):
            above = {"wilson": 0, "bootstrap": 0}
            for _ in range(draws):
                s = np.clip(np.where(rng.random(n) < 0.45, 1.0, rng.random(n)) * mean / (0.45 + 0.55 / 2), 0, 1)
                for method in above:
                    above[method] += task_interval(_result(s, "f1"), 0.95, method, 2000, 0).low > mean
            rows += [{"interval": f"{m}, fractional scores (simulated)", "n": n, "truth": mean, "above": a / draws}
                     for m, a in above.items()]  # fmt: skip
        # non-inferiority declared at a true difference of exactly -5 points: the decision itself
        for disc in (0.15, 0.40):
            declared = sum(prob * _declares(v, ref, "exact_match", paired_diff, non_inferiority_check, Evidence)
                           for prob, v, ref in paired_tables(n, (disc - 0.05) / 2, (disc + 0.05) / 2))
            rows.append({"interval": f"non-inferiority declared, 0/1, {100 * disc:.0f}% discordant (exact)", "n": n,
                         "truth": -0.05, "above": declared})
        hits = 0
        for _ in range(draws):
            ref = np.where(rng.random(n) < 0.3, 1.0, np.where(rng.random(n) < 0.2, 0.0, rng.random(n)))
            v = np.where(rng.random(n) < 0.174, ref * rng.random(n), ref)  # mean drop about 5 points
            hits += _declares(v, ref, "f1", paired_diff, non_inferiority_check, Evidence)
        rows.append({"interval": "non-inferiority declared, fractional (simulated)", "n": n, "truth": -0.05,
                     "above": hits / draws})
    return rows


def paired_tables(n: int, p_gained: float, p_lost: float):  # type: ignore[no-untyped-def]
    """Every paired 0/1 table of n items worth summing: (its probability, variant, reference) with
    `gained` items only the variant gets right and `lost` only the reference."""
    for g in range(n + 1):
        for c in range(n + 1 - g):
            prob = float(np.exp(gammaln(n + 1) - gammaln(g + 1) - gammaln(c + 1) - gammaln(n - g - c + 1)
                                + xlogy(g, p_gained) + xlogy(c, p_lost) + xlogy(n - g - c, 1 - p_gained - p_lost)))
            if prob >= 1e-9:
                yield prob, np.r_[np.ones(g), np.zeros(c), np.ones(n - g - c)], np.r_[np.zeros(g), np.ones(c), np.ones(n - g - c)]


def _declares(v, ref, metric, paired_diff, check, evidence, margin=0.05) -> bool:  # type: ignore[no-untyped-def]
    """select()'s non-inferiority check of v against ref (margin 5 points unless given)."""
    diff = paired_diff(_result(v, metric), _result(ref, metric), 0.95, 2000, 0)
    ev = evidence(RunRecord(key="v", variant=Variant(model="m", precision="int8"), status="completed",
                            tasks={"t": _result(v, metric)}), paired={"t": diff})  # fmt: skip
    return bool(check(ev, "t", margin, "m/bf16", 0.95).passed)


RISK_SIZES = (24, 48, 100)
RISK_FLOOR = 0.60


def _one_task(n: int, k: int, metric: str = "exact_match") -> RunRecord:
    scores = np.r_[np.ones(k), np.zeros(n - k)]
    return RunRecord(key="v", variant=Variant(model="m", precision="int8", params=10**9), status="completed",
                     tasks={"t": _result(scores, metric)}, memory=MemoryResult(weight_bytes=10**9))  # fmt: skip


def least_passing(n: int, floor: float, **rule: object) -> int:
    """The least count of n that select() passes against `floor` under the rule (n + 1: none)."""
    pol = PolicyConfig(floors={"t": floor}, **rule)  # type: ignore[arg-type]
    for k in range(n + 1):
        if select([_one_task(n, k)], pol).winner is not None:
            return k
    return n + 1


def point_risk() -> list[dict[str, object]]:
    """(c): P(select() passes a variant truly `gap` under the floor), exact over every count, per
    rule; beside it the true accuracy a variant needs to pass 80% of the time, and the figure the
    report prints (selector.selection.power, where this checkout has it)."""
    from scipy.optimize import brentq
    from scipy.stats import binom

    try:
        from selector.selection import power
    except ImportError:
        power = None
    rules = {"point": {"rule": "point"}, "lower_bound wilson": {"rule": "lower_bound", "ci_method": "wilson"},
             "lower_bound exact": {"rule": "lower_bound", "ci_method": "exact"}}
    rows = []
    for name, rule in rules.items():
        for n in RISK_SIZES:
            k = least_passing(n, RISK_FLOOR, **rule)
            row: dict[str, object] = {"rule": name, "n": n, "floor": RISK_FLOOR, "least passing": f"{k}/{n}"}
            for gap in (0.05, 0.10):
                row[f"passes at -{100 * gap:.0f} points"] = float(binom.sf(k - 1, n, RISK_FLOOR - gap))
            row["true accuracy to pass 80%"] = (float(brentq(lambda p: binom.sf(k - 1, n, p) - 0.8, 1e-9, 1 - 1e-9))
                                                if k <= n else None)  # fmt: skip
            if power is not None:
                row["report's figure at -5 points"] = power.pass_chance(rule["rule"], RISK_FLOOR - 0.05, RISK_FLOOR, n,
                                                                        0.95, rule.get("ci_method", "wilson"))
            rows.append(row)
    return rows


def interval_worst_case() -> list[dict[str, object]]:
    """(d): P(the decision's lower end lies above the true p), exact over every count, worst over p in
    0.001 ... 0.999 (and at the p where issue 36 found Wilson's worst), per n, method and metric:
    exact_match, and f1 whose scores are all 0 or 1 (binomial too)."""
    from scipy.stats import binom

    from selector.selection.checks import CI_METHODS
    from selector.selection.evidence import task_interval

    grid = np.round(np.arange(1, 1000) / 1000, 3)
    rows = []
    for n in RISK_SIZES:
        for metric in ("exact_match", "f1"):
            for method in CI_METHODS:
                low = np.array([task_interval(_result(np.r_[np.ones(k), np.zeros(n - k)], metric), 0.95, method,
                                              2000, 0).low for k in range(n + 1)])  # fmt: skip
                pmf = binom.pmf(np.arange(n + 1)[None, :], n, grid[:, None])
                above = (pmf * (low[None, :] > grid[:, None])).sum(axis=1)
                worst = int(above.argmax())
                at = {p: float(above[int(round(p * 1000)) - 1]) for p in (0.011, 0.07, 0.504)}
                rows.append({"n": n, "metric": metric, "method": method, "worst": float(above[worst]),
                             "at p": float(grid[worst]), **{f"p = {p}": v for p, v in at.items()}})
    return rows


def equal_variant_power() -> dict[str, object]:
    """Point 3: P(non-inferiority is declared) for a variant truly equal to the reference (as many
    items gained as lost on average), exact over every table at n = 48, through the selection's
    own check; and the half-width identical fractional scores get. Beside it, what the preflight
    and the report now say (selector.selection.power), where this checkout has it."""
    from selector.selection.checks import non_inferiority_check
    from selector.selection.evidence import Evidence, paired_diff
    from selector.stats_paired import paired_fractional

    try:
        from selector.selection import power
    except ImportError:
        power = None
    n = 48
    rows = []
    for margin in (0.05, 0.10, 0.15):
        row: dict[str, object] = {"n": n, "margin": margin}
        for disc in (0.0, 0.05, 0.10, 0.20):
            row[f"{100 * disc:.0f}% discordant"] = sum(
                prob * _declares(v, ref, "exact_match", paired_diff, non_inferiority_check, Evidence, margin)
                for prob, v, ref in paired_tables(n, disc / 2, disc / 2))
        rows.append(row)
    low, _, _ = paired_fractional(np.zeros(n), 0.95)
    detect = {}
    if power is not None:
        for disc in (0.0, 0.10):
            detect[f"0/1, {100 * disc:.0f}% discordant"] = power.detectable_margin(n, 0.95, True, disc)
        detect["fractional, identical"] = power.detectable_margin(n, 0.95, False, 0.0)
    return {"declared": rows, "identical_fractional_low": low, "detectable": detect}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=str(RESULTS_DIR / "verdict_edges"))
    parser.add_argument("--label", default="", help="a line under the title (which checkout this is)")
    args = parser.parse_args(argv)
    draws = 100 if args.quick else 400
    start = time.process_time()
    rng = np.random.default_rng(SEED)
    rejection = {f"{rule}, {'fractional extraction' if frac else 'all 0/1'}": false_rejection(rule, frac, draws, rng)
                 for frac in (False, True) for rule in RULES}  # fmt: skip
    rejection.update({f"{rule}, {'fractional extraction' if frac else 'all 0/1'}": false_rejection(rule, frac, draws, rng)
                      for frac in (False, True) for rule in EXACT})  # after the others: their draws stay comparable
    coverage = interval_coverage(draws, rng)
    limits = sequence.with_limit(draws, rng, SIZES, FLOORS, RULES["lower_bound wilson"])
    qwen = sequence.qwen_agreement(draws, rng, SIZES, FLOORS)
    data = {"seed": SEED, "draws": draws, "label": args.label, "false_rejection": rejection, "coverage": coverage,
            "winner": limits, "qwen": qwen, "point_risk": point_risk(), "worst_case": interval_worst_case(),
            "equal_variant": equal_variant_power(), "cpu_s": 0.0}  # fmt: skip
    data["cpu_s"] = round(time.process_time() - start, 1)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump(data, f, indent=2)
    md = markdown(data)
    with open(args.out + ".md", "w") as f:
        f.write(md)
    print(md)
    return 0


def _pct(x: object) -> str:
    return "—" if x is None else f"{100 * float(x):.2f}%"  # type: ignore[arg-type]


def markdown(data: dict) -> str:  # type: ignore[type-arg]
    qwen, eq = data["qwen"], data["equal_variant"]
    md = [f"# Verdicts at the edges\n\n{data['label'] + chr(10) + chr(10) if data['label'] else ''}"
          f"Seed {SEED}, {data['draws']} draws a cell, {data['cpu_s']} CPU seconds; "
          "produced by `python -m benchmarks.verdict_edges`.\n",
          "## False rejection at the boundary (nominal 5%: search.alpha)\n",
          markdown_table(["rule, eval set", "rejected early", "full-set means"],
                         [[k, _pct(v["rate"]), ", ".join(f"{t} {100 * m:.1f}%" for t, m in v["means"].items())]
                          for k, v in data["false_rejection"].items()]),  # fmt: skip
          "\n## Lower end above the truth (nominal 2.5%)\n",
          markdown_table(["interval", "n", "truth", "lower end above it"],
                         [[r["interval"], r["n"], r["truth"], _pct(r["above"])] for r in data["coverage"]]),
          "\n## Lower end above the truth, worst over p (exact; nominal 2.5%)\n",
          "Every count's interval through the selection's own `task_interval`; p over 0.001 ... 0.999. "
          "`f1` here has scores that are all 0 or 1 (single-token answers): binomial too.\n",
          markdown_table(["n", "metric", "ci_method", "worst", "at p", "p = 0.011", "p = 0.07", "p = 0.504"],
                         [[r["n"], r["metric"], r["method"], _pct(r["worst"]), r["at p"], _pct(r["p = 0.011"]),
                           _pct(r["p = 0.07"]), _pct(r["p = 0.504"])] for r in data["worst_case"]]),  # fmt: skip
          "\n## (c) A variant under the floor passes (exact over every count, through select())\n",
          f"One task, floor {100 * RISK_FLOOR:.0f}%. \"report's figure\": what the report prints next to the "
          "verdict (selector.selection.power), where the checkout has it.\n",
          markdown_table(["rule", "n", "least passing", "passes at -5 points", "passes at -10 points",
                          "true accuracy to pass 80%", "report's figure at -5 points"],
                         [[r["rule"], r["n"], r["least passing"], _pct(r["passes at -5 points"]),
                           _pct(r["passes at -10 points"]), _pct(r["true accuracy to pass 80%"]),
                           _pct(r.get("report's figure at -5 points"))] for r in data["point_risk"]]),  # fmt: skip
          "\n## Non-inferiority for a variant truly equal to the reference (n = 48, exact, 0/1 scores)\n",
          "P(non-inferiority declared), as many items gained as lost on average, by the share of items "
          f"that flip. Identical fractional scores: the interval's lower end is "
          f"{100 * eq['identical_fractional_low']:+.1f} points.\n",
          markdown_table(["margin", "0% discordant", "5% discordant", "10% discordant", "20% discordant"],
                         [[f"{100 * r['margin']:.0f} points", *(_pct(r[f"{d}% discordant"]) for d in (0, 5, 10, 20))]
                          for r in eq["declared"]]),  # fmt: skip
          ("\nWhat the preflight and the report say (smallest margin shown with 80% power): " +
           ", ".join(f"{k} {100 * v:.1f} points" for k, v in eq["detectable"].items()) + ".\n")
          if eq["detectable"] else "\n(no minimum detectable effect in this checkout)\n",
          "\n## (a) The winner's error, and a memory limit the largest misses (nominal 2.5%)\n",
          "Under lower_bound; arithmetic decides: three variants truly miss its 60% floor by 0.5-2 points, three "
          "clear it by 15-25, and every other task sits 25 points above its floor (six variants). \"seven\": "
          f"a larger variant on top, clearing arithmetic by 30 points, whose 32 GB of weights are over "
          f"max_weight_gb={sequence.LIMIT_GB:g} (the six have 16 GB and less). Same draws for every row. With the "
          "limit, a sequence that leaves the over-limit variant out matches the six-variant rows draw for draw.\n",
          markdown_table(["winner_control, ladder, limit", "misses a floor: grid", "no winner: grid",
                          "misses a floor: search", "no winner: search",
                          "items scored by the search (share of the grid's)"],
                         [[k, _pct(v["winner misses a floor (grid)"]), _pct(v["no winner (grid)"]),
                           _pct(v["winner misses a floor (search)"]), _pct(v["no winner (search)"]),
                           _pct(v["items scored (share of the grid)"])] for k, v in data["winner"].items()]),
          "\n## (b) The +sweep=qwen ladder under fixed_sequence: search and selection\n",
          "Planned weight memory (GB): " + ", ".join(f"{n} {gb}" for n, gb in qwen["planned_gb"].items()) + ".\n",
          markdown_table(["draws", *qwen["counts"]], [[qwen["draws"], *(f"{c} ({_pct(c / qwen['draws'])})"
                                                                        for c in qwen["counts"].values())]])]
    return "\n".join(md) + "\n"


if __name__ == "__main__":
    sys.exit(main())
