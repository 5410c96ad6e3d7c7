"""How often adaptive search gets it wrong, and how much work it saves, by simulation.

Each simulated sweep draws an eval set (3 tasks of 40-200 items; 0/1 scores, or token-F1-like
fractional scores on a quarter of the tasks), a ladder of 4 models x 3 precisions whose per-item
scores come from a shared item difficulty, a rule (point or lower_bound, Clopper-Pearson), a per-variant
alpha (0.01, 0.05 or 0.10) and floors (up to 20 points under the best variant's full-set score, in
steps of 5 points, so some variants sit far from a floor and some near it). In "boundary" sweeps
(a third) the floors are set so one variant's full-set result sits exactly on the threshold of
every task: the least favourable case for a false rejection. The full-evaluation verdict of every
variant is computed on the same item populations with the selection's own interval
(selector.stats.mean_interval under the default ci_method: Clopper-Pearson on the score sum),
independently of the search code; the adaptive side runs the real FloorTests (one per floor,
alpha split over them, vectorized, and checked against FloorTest.decide itself on every 10th
sweep's target variant) and the real SearchDriver, with the sibling rule at its default
(search.sibling_margin); the machinery is benchmarks/search_simulation.py. benchmarks/sibling_rule.py applies that rule to the README's stored grid,
to these ladders at several margins and to ladders where quantization can gain on a task, and
states how often it skips a variant the grid found eligible beside the time it saves.
benchmarks/verdict_edges.py runs the whole evaluation loop and select() at the default eval set's
sizes.

    python -m benchmarks.adaptive_simulation            # 10,000 sweeps, about 3 minutes on one core
    python -m benchmarks.adaptive_simulation --sweeps 500

Writes benchmarks/results/adaptive_simulation.json and .md; exits 1 if an error rate is significantly
above alpha.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from benchmarks.common import RESULTS_DIR
from selector.search import bounds
from benchmarks.search_simulation import (
    ALPHAS, CHECK_EVERY, MODELS, PRECISIONS, ROUND_SIZE, SEED, SIBLING_MARGIN, SIZES, WORKERS, count, draw_sweep,
    exact_boundary_table, grid, judge, rate, search,
)
from benchmarks.sibling_rule import (
    MARGINS, SIBLING_KEYS, STORED_GRIDS, readme_grid, siblings_summary, stress_ladders,
    tally_no_fidelity, tally_siblings,
)
from selector.stats import wilson_interval

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sweeps", type=int, default=10_000)
    parser.add_argument("--spending-sweeps", type=int, default=2_000, help="sweeps for the spending comparison")
    parser.add_argument("--stress-sweeps", type=int, default=3_000, help="ladders where quantization can gain")
    parser.add_argument("--readme-draws", type=int, default=2_000, help="item orders of the README's stored grid")
    args = parser.parse_args(argv)
    started = time.process_time()
    rng = np.random.default_rng(SEED)
    errors: dict[float, dict] = {a: {} for a in ALPHAS}  # alpha -> kind -> (hits, n)
    work = {w: dict.fromkeys(("materialized", "items", "cost", "wall"), 0.0) for w in WORKERS}
    grid_work = {w: dict.fromkeys(("materialized", "items", "cost", "wall"), 0.0) for w in WORKERS}
    item_fraction, materialized_fraction, failing_items = [], [], []
    spending_errors: dict[str, dict] = {s: {} for s in bounds.SPENDING}
    spending_items: dict[str, list] = {s: [] for s in bounds.SPENDING}
    baseline_first: dict[int, dict] = {w: {} for w in WORKERS}
    margins = ("off", *MARGINS)
    siblings = {m: dict.fromkeys(SIBLING_KEYS, 0.0) for m in margins}  # the rule on the randomised ladders
    no_fidelity = {k: 0.0 for k in ("smallest first", "smallest first + rule", "baseline first + rule",
                                    "winner differs")}  # fmt: skip
    for k in range(args.sweeps):
        sweep = draw_sweep(rng)
        verdict = judge(sweep, "pocock", check=k % CHECK_EVERY == 0)
        ok, tally = verdict["eligible"], errors[sweep["alpha"]]
        count(tally, "false_rejection", int(np.sum(ok & verdict["stopped"])), int(ok.sum()))
        if sweep["boundary"] and ok[sweep["target"]]:
            count(tally, "boundary_false_rejection", int(verdict["stopped"][sweep["target"]]), 1)
        failing_items += list(verdict["items"][~ok] / verdict["total"])
        for w in WORKERS:
            ours, full = search(sweep, verdict, w), grid(sweep, verdict, w)
            for key in work[w]:
                work[w][key] += ours[key]
                grid_work[w][key] += full[key]
            if k < args.spending_sweeps:  # the order before baseline_first, on the same sweeps (rule off in both)
                before = search(sweep, verdict, w, baseline_first=False, sibling_margin=None)
                now = search(sweep, verdict, w, sibling_margin=None)
                for key, value in (("cost", now["cost"]), ("wall", now["wall"]), ("loads", now["baseline_loads"]),
                                   ("cost_before", before["cost"]), ("wall_before", before["wall"]),
                                   ("loads_before", before["baseline_loads"]),
                                   ("winner_differs", int(now["best"] != before["best"]))):
                    baseline_first[w][key] = baseline_first[w].get(key, 0) + value
            if w == 1:
                tally_siblings(siblings, sweep, verdict, full, ours)
                if k < args.spending_sweeps:
                    tally_no_fidelity(no_fidelity, sweep, verdict)
                item_fraction.append(ours["items"] / full["items"])
                materialized_fraction.append(ours["materialized"] / full["materialized"])
                if full["best"] is not None:
                    count(tally, "wrong_winner", int(ours["best"] != full["best"]), 1)
        if k < args.spending_sweeps:
            for spending in bounds.SPENDING:
                other = verdict if spending == "pocock" else judge(sweep, spending)
                count(spending_errors[spending], "false_rejection", int(np.sum(ok & other["stopped"])), int(ok.sum()))
                spending_items[spending] += list(other["items"][~ok] / other["total"])
    stress = stress_ladders(args.stress_sweeps)
    readme = {label: readme_grid(args.readme_draws, grid) for label, grid in STORED_GRIDS.items()}
    setup = {
        "tasks": 3, "items_per_task": SIZES, "fractional_task_share": 0.25, "alphas": ALPHAS,
        "rules": ["point", "lower_bound (Clopper-Pearson, 95%: the default ci_method)"], "boundary_sweep_share": 1 / 3,
        "candidates": len(MODELS) * len(PRECISIONS), "models": MODELS, "precisions": PRECISIONS,
    }  # fmt: skip
    result = {
        "seed": SEED, "sweeps": args.sweeps, "round_size": ROUND_SIZE, "spending": "pocock", "setup": setup,
        "per_alpha": {str(a): {kind: rate(*hn) for kind, hn in t.items()} for a, t in errors.items()},
        "mean_item_fraction": float(np.mean(item_fraction)),
        "mean_materialized_fraction": float(np.mean(materialized_fraction)),
        "mean_item_fraction_of_failing_variants": float(np.mean(failing_items)),
        "workers": {
            str(w): {f"{key}_vs_grid": work[w][key] / grid_work[w][key] for key in work[w]} for w in WORKERS
        },
        "spending_comparison": {
            s: {"sweeps": min(args.sweeps, args.spending_sweeps), "false_rejection": rate(*spending_errors[s]["false_rejection"]),
                "mean_item_fraction_of_failing_variants": float(np.mean(spending_items[s]))}
            for s in bounds.SPENDING
        },
        "baseline_first": {str(w): {"sweeps": min(args.sweeps, args.spending_sweeps), **t}
                           for w, t in baseline_first.items()},
        "exact_boundary": exact_boundary_table(),
        "siblings": {"sibling_margin": SIBLING_MARGIN, "sweeps": args.sweeps, "per_margin": siblings,
                     "no_fidelity": {"sweeps": min(args.sweeps, args.spending_sweeps), **no_fidelity},
                     "stress": stress, "readme": readme},
        "cpu_seconds": round(time.process_time() - started, 1),
    }  # fmt: skip
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "adaptive_simulation.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS_DIR / "adaptive_simulation.md").write_text(summary(result))
    print(summary(result))
    # Significantly above alpha (the 95% interval's low end past it): a small --sweeps run's noise
    # alone does not trip it; the default run's point rates are all far below alpha.
    too_high = [(a, key) for a, s in result["per_alpha"].items() for key, r in s.items()
                if r["n"] and wilson_interval(r["hits"], r["n"], 0.95)[0] > float(a)]  # fmt: skip
    if too_high:
        print(f"error rate above alpha: {too_high}", file=sys.stderr)
        return 1
    return 0


def summary(r: dict) -> str:
    pct = lambda x: f"{100 * x:.2f}%"  # noqa: E731
    lines = [
        "# Adaptive search by simulation", "",
        f"{r['sweeps']:,} simulated sweeps (seed {r['seed']}), {r['setup']['candidates']} candidates each, 3 tasks of "
        f"40-200 items (a quarter fractional), rules point and lower_bound, rounds of {r['round_size']} items, "
        f"{r['spending']} spending; {r['cpu_seconds']} CPU seconds. Produced by `python -m benchmarks.adaptive_simulation`.", "",
        "## Error rates (per-variant alpha)", "",
        "| alpha | full-set-eligible variants rejected early | boundary variants rejected early | different winner than the full grid |",
        "|---|---|---|---|",
    ]  # fmt: skip
    for a, s in r["per_alpha"].items():
        cells = [f"{s[k]['hits']}/{s[k]['n']} = {pct(s[k]['rate'] or 0)} (95% upper {pct(s[k]['upper_95'] or 0)})"
                 for k in ("false_rejection", "boundary_false_rejection", "wrong_winner")]  # fmt: skip
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    lines += ["", f"Mean fraction of items scored (1 worker): {pct(r['mean_item_fraction'])} of the grid's; "
              f"candidates materialized: {pct(r['mean_materialized_fraction'])}; a variant that fails the full set "
              f"is stopped after {pct(r['mean_item_fraction_of_failing_variants'])} of its items on average.", "",
              "## What survives with several workers (totals vs the full grid on as many workers)", "",
              "| workers | materialized | items scored | compute cost | wall time (synchronous waves) | compute saving kept vs 1 worker |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    one = 1 - r["workers"]["1"]["cost_vs_grid"]
    for w, t in r["workers"].items():
        kept = (1 - t["cost_vs_grid"]) / one if one > 0 else float("nan")
        lines.append(f"| {w} | {pct(t['materialized_vs_grid'])} | {pct(t['items_vs_grid'])} | {pct(t['cost_vs_grid'])} "
                     f"| {pct(t['wall_vs_grid'])} | {pct(kept)} |")  # fmt: skip
    lines += [
        "",
        "## Spending functions (same sweeps)",
        "",
        "| spending | false rejections | items scored by failing variants |",
        "|---|---|---|",
    ]
    for s, v in r["spending_comparison"].items():
        fr = v["false_rejection"]
        lines.append(
            f"| {s} | {fr['hits']}/{fr['n']} = {pct(fr['rate'] or 0)} | {pct(v['mean_item_fraction_of_failing_variants'])} |"
        )
    lines += ["", "## Baseline first (fidelity on: each model's bf16 runs before its other precisions)", "",
              "Baseline loads count each baseline run and each time a sibling's preparation loads the baseline for "
              "the fidelity reference because the baseline had not run yet.", "",
              "| workers | sweeps | baseline loads per sweep (before -> now) | compute cost (before -> now) "
              "| wall time (before -> now) | different winner |", "|---|---|---|---|---|---|"]  # fmt: skip
    for w, t in r["baseline_first"].items():
        n = t["sweeps"]
        lines.append(f"| {w} | {n} | {t['loads_before'] / n:.2f} -> {t['loads'] / n:.2f} | {t['cost_before'] / n:.0f} s "
                     f"-> {t['cost'] / n:.0f} s | {t['wall_before'] / n:.0f} s -> {t['wall'] / n:.0f} s "
                     f"| {t['winner_differs']} |")  # fmt: skip
    lines += siblings_summary(r["siblings"])
    lines += ["", "## Exact false-rejection probability at the boundary (0/1 scores, floor 60%)", "",
              "| items | alpha per test | exact |", "|---|---|---|"]  # fmt: skip
    for row in r["exact_boundary"]:
        lines.append(f"| {row['n_items']} | {row['alpha_per_test']:.4f} | {row['exact_false_rejection']:.5f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
