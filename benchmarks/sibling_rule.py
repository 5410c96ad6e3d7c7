"""Siblings of a failing baseline (search.sibling_margin): what the rule skips, what it saves, and how
often it skips a variant the full grid found eligible. Run by benchmarks/adaptive_simulation.py,
which writes the tables.

- The stored grids: the README's table of the default sweep (3 models x bf16, int8, AWQ, GPTQ on the
  default eval set, every variant measured) as measured at each commit it was re-measured: each
  variant's per-task counts, scored in a fresh random item order per draw by the real FloorTests
  and driven by the real SearchDriver, with and without the rule. Time saved: that grid's measured
  quantization times of what the rule skips, plus its loading and items at the simulation's stated
  costs.
- The largest gain of any quantized variant over its own baseline, per task, in each stored grid
  (the figure the default sibling_margin is chosen from).
- Stress ladders: the simulation's ladders with quantization that re-draws a share of the items
  (2-30%: the README grids' 0.5-28.5% flipped) and shifts each task's ability on its own, so that a
  quantized copy can beat its baseline on a task as the stored grid's did; the rate at which the
  rule skips a variant the grid found eligible, per margin.
"""

from __future__ import annotations

import numpy as np

from selector.search.candidates import Shortfall

# The README's "What the default sweep measured": accuracy per task (%), quantization time (s), per
# commit it was measured at (benchmarks/grid_table.py reads a grid's report into this form).
README_SIZES = {"sentiment": 48, "extraction": 48, "arithmetic": 48, "code": 42}
README_FLOORS = {"sentiment": 0.80, "extraction": 0.70, "arithmetic": 0.60, "code": 0.50}
GRID_1A9F009 = {  # variant: (sentiment, extraction, arithmetic, code, weights GB, quantize s, parameters B)
    "smollm2-135m/bf16": (91.7, 83.3, 2.1, 21.4, 0.27, 0.0, 0.135),
    "smollm2-135m/int8": (91.7, 79.2, 0.0, 26.2, 0.16, 5.0, 0.135),
    "smollm2-135m/awq-int4": (81.2, 60.4, 4.2, 19.0, 0.27, 81.0, 0.135),
    "smollm2-135m/gptq-int4": (77.1, 18.8, 2.1, 14.3, 0.12, 34.0, 0.135),
    "gemma3-270m/bf16": (85.4, 85.4, 4.2, 9.5, 0.54, 0.0, 0.268),
    "gemma3-270m/int8": (91.7, 85.4, 4.2, 9.5, 0.44, 5.0, 0.268),
    "gemma3-270m/awq-int4": (85.4, 41.7, 0.0, 0.0, 0.54, 43.0, 0.268),
    "gemma3-270m/gptq-int4": (93.8, 62.5, 6.2, 2.4, 0.39, 45.0, 0.268),
    "qwen2.5-coder-1.5b/bf16": (97.9, 97.9, 85.4, 85.7, 3.55, 0.0, 1.78),
    "qwen2.5-coder-1.5b/int8": (97.9, 97.9, 85.4, 85.7, 2.24, 5.0, 1.78),
    "qwen2.5-coder-1.5b/awq-int4": (97.9, 97.9, 81.2, 83.3, 3.58, 709.0, 1.78),
    "qwen2.5-coder-1.5b/gptq-int4": (97.9, 97.9, 85.4, 83.3, 1.63, 521.0, 1.78),
}
GRID_9C357C1 = {  # a clean clone of 9c357c1 on a quiet 2-core Intel Xeon (benchmarks/results/default_grid.md)
    "smollm2-135m/bf16": (91.7, 85.4, 2.1, 21.4, 0.27, 0.0, 0.135),
    "smollm2-135m/int8": (79.2, 81.2, 0.0, 21.4, 0.16, 5.0, 0.135),
    "smollm2-135m/awq-int4": (83.3, 66.7, 4.2, 11.9, 0.27, 50.0, 0.135),
    "smollm2-135m/gptq-int4": (75.0, 14.6, 0.0, 7.1, 0.12, 42.0, 0.135),
    "gemma3-270m/bf16": (85.4, 85.4, 4.2, 9.5, 0.54, 0.0, 0.268),
    "gemma3-270m/int8": (87.5, 85.4, 4.2, 11.9, 0.44, 5.0, 0.268),
    "gemma3-270m/awq-int4": (89.6, 43.8, 0.0, 0.0, 0.54, 32.0, 0.268),
    "gemma3-270m/gptq-int4": (79.2, 70.8, 6.2, 0.0, 0.39, 53.0, 0.268),
    "qwen2.5-coder-1.5b/bf16": (97.9, 97.9, 85.4, 85.7, 3.55, 0.0, 1.78),
    "qwen2.5-coder-1.5b/int8": (97.9, 97.9, 83.3, 85.7, 2.25, 5.0, 1.78),
    "qwen2.5-coder-1.5b/awq-int4": (97.9, 97.9, 83.3, 83.3, 3.58, 560.0, 1.78),
    "qwen2.5-coder-1.5b/gptq-int4": (95.8, 95.8, 85.4, 88.1, 1.63, 490.0, 1.78),
}
STORED_GRIDS = {"1a9f009 (2026-11-30)": GRID_1A9F009, "9c357c1 (2026-12-04)": GRID_9C357C1}
README_GRID = GRID_9C357C1  # the one the README shows
MARGINS = (0.05, 0.10, 0.15, 0.20)


def readme_counts(grid: dict[str, tuple] = README_GRID) -> dict[str, dict[str, int]]:  # type: ignore[type-arg]
    """Items right per task, from the table's percentages (n = 48, code 42)."""
    return {name: {t: int(round(row[i] / 100 * n)) for i, (t, n) in enumerate(README_SIZES.items())}
            for name, row in grid.items()}  # fmt: skip


def largest_gains(counts: dict[str, dict[str, int]]) -> list[dict[str, object]]:
    """Per quantized variant and task, its gain over its own model's baseline; the largest first."""
    rows = []
    for name, tasks in counts.items():
        model, precision = name.split("/")
        if precision == "bf16":
            continue
        base = counts[f"{model}/bf16"]
        for task, n in README_SIZES.items():
            rows.append({"variant": name, "task": task, "gain": (tasks[task] - base[task]) / n,
                         "items": tasks[task] - base[task], "n": n})  # fmt: skip
    return sorted(rows, key=lambda r: -float(r["gain"]))  # type: ignore[arg-type]


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


def readme_sweep(rng: np.random.Generator, grid: dict[str, tuple]) -> dict:  # type: ignore[type-arg]
    """A stored grid as a sweep: each variant's per-task counts (sibling_rule.readme_counts), one
    fresh random order per task; costs: loading 10 s + 4 s per GB, the grid's measured quantization
    seconds, one item 0.05 s + 0.25 s per billion parameters."""
    from benchmarks.adaptive_simulation import Variant
    counts = readme_counts(grid)
    variants = []
    for name, row in grid.items():
        model, precision = name.split("/")
        gb, quantize_s, params = row[4], row[5], row[6]
        variants.append(Variant(name, model, params, gb, gb, "bf16" if precision == "bf16" else precision,
                                10 + 4 * gb + quantize_s, 0.05 + 0.25 * params))  # fmt: skip
    sizes = np.array(list(README_SIZES.values()))
    scores = [np.array([np.r_[np.ones(counts[v.name][t]), np.zeros(n - counts[v.name][t])] for v in variants])
              for t, n in README_SIZES.items()]  # fmt: skip
    floors = {f"t{j}": f for j, f in enumerate(README_FLOORS.values())}
    return dict(variants=variants, sizes=sizes, binary=np.ones(len(sizes), bool), rule="point", alpha=0.05,
                boundary=False, scores=scores, floors=floors, target=0,
                orders=[rng.permutation(int(n)) for n in sizes])  # fmt: skip


SIBLING_KEYS = ("skipped", "skipped_eligible", "eligible_siblings", "winner_differs", "cost", "grid_cost",
                "quantize_s_skipped")


def tally_siblings(tally: dict, sweep: dict, verdict: dict, full: dict, ours: dict | None = None) -> None:
    """One sweep, one worker: the rule at each margin (and off) against the full grid."""
    from benchmarks.adaptive_simulation import SIBLING_MARGIN, search
    variants = sweep["variants"]
    by_name = {v.name: i for i, v in enumerate(variants)}
    eligible_siblings = sum(bool(verdict["eligible"][i]) for i, v in enumerate(variants) if v.precision != "bf16")
    for m in tally:
        margin = None if m == "off" else m
        res = ours if ours is not None and margin == SIBLING_MARGIN else search(sweep, verdict, 1, sibling_margin=margin)
        t = tally[m]
        t["skipped"] += len(res["skipped"])
        t["skipped_eligible"] += sum(bool(verdict["eligible"][by_name[n]]) for n in res["skipped"])
        t["eligible_siblings"] += eligible_siblings
        t["winner_differs"] += int(full["best"] is not None and res["best"] != full["best"])
        t["cost"] += res["cost"]
        t["grid_cost"] += full["cost"]
        t["quantize_s_skipped"] += sum(variants[by_name[n]].setup_s - 10 - 4 * variants[by_name[n]].planned_gb
                                       for n in res["skipped"])  # fmt: skip


def tally_no_fidelity(tally: dict, sweep: dict, verdict: dict) -> None:
    """Fidelity off (no reference to share): the order only matters for the rule. Compute cost of
    smallest first without and with the rule, and baseline first with it."""
    from benchmarks.adaptive_simulation import search
    plain = search(sweep, verdict, 1, baseline_first=False, sibling_margin=None, fidelity=False)
    smallest = search(sweep, verdict, 1, baseline_first=False, fidelity=False)
    first = search(sweep, verdict, 1, baseline_first=True, fidelity=False)
    tally["smallest first"] += plain["cost"]
    tally["smallest first + rule"] += smallest["cost"]
    tally["baseline first + rule"] += first["cost"]
    tally["winner differs"] += int(first["best"] != plain["best"])


def stress_ladders(sweeps: int) -> dict:
    """Ladders where quantization can gain on a task (populations(stress=True)): the largest gains
    of a quantized variant over its baseline, and the rule's skips of grid-eligible variants."""
    from benchmarks.adaptive_simulation import SEED, draw_sweep, grid, judge
    rng = np.random.default_rng(SEED + 1)
    tally = {m: dict.fromkeys(SIBLING_KEYS, 0.0) for m in ("off", *MARGINS)}
    gains = []
    for _ in range(sweeps):
        sweep = draw_sweep(rng, stress=True)
        verdict = judge(sweep, "pocock")
        names = [v.name for v in sweep["variants"]]
        for scores in sweep["scores"]:
            means = dict(zip(names, scores.mean(axis=1)))
            gains += [means[n] - means[f"{n.split('/')[0]}/bf16"] for n in names if not n.endswith("/bf16")]
        tally_siblings(tally, sweep, verdict, grid(sweep, verdict, 1))
    g = np.array(gains)
    return {"sweeps": sweeps, "per_margin": tally, "gain_max": float(g.max()),
            "gain_quantiles": {q: float(np.quantile(g, q)) for q in (0.5, 0.99, 0.999)},
            "gain_share_over": {m: float(np.mean(g > m)) for m in MARGINS}}


def readme_grid(draws: int, table: dict[str, tuple]) -> dict:  # type: ignore[type-arg]
    """A stored grid, in `draws` random item orders: the rule's skips (by name), against the grid's
    eligible variants and winner, and what it saves."""
    from benchmarks.adaptive_simulation import SEED, grid, judge, search
    rng = np.random.default_rng(SEED + 2)
    tally = {m: dict.fromkeys(SIBLING_KEYS, 0.0) for m in ("off", *MARGINS)}
    skipped: dict[str, int] = {}
    winners: dict[str, int] = {}
    no_fidelity = {k: 0.0 for k in ("smallest first", "smallest first + rule", "baseline first + rule",
                                    "winner differs")}  # fmt: skip
    for _ in range(draws):
        sweep = readme_sweep(rng, table)
        verdict = judge(sweep, "pocock")
        full = grid(sweep, verdict, 1)
        ours = search(sweep, verdict, 1)
        tally_no_fidelity(no_fidelity, sweep, verdict)
        for name in ours["skipped"]:
            skipped[name] = skipped.get(name, 0) + 1
        winners[str(ours["best"])] = winners.get(str(ours["best"]), 0) + 1
        tally_siblings(tally, sweep, verdict, full, ours)
    sweep = readme_sweep(rng, table)
    verdict = judge(sweep, "pocock")
    return {"draws": draws, "per_margin": tally, "skipped": skipped, "winners": winners, "no_fidelity": no_fidelity,
            "grid_winner": grid(sweep, verdict, 1)["best"],
            "grid_eligible": [v.name for v, ok in zip(sweep["variants"], verdict["eligible"]) if ok],
            "largest_gains": largest_gains(readme_counts(table))[:5]}


def stored_grid_paragraph(label: str, readme: dict, margin: float) -> list[str]:
    off, on = readme["per_margin"]["off"], readme["per_margin"][margin]
    gains = ", ".join(f"{g['variant']} on {g['task']} {100 * g['gain']:+.1f} points ({g['items']:+d} of {g['n']})"
                      for g in readme["largest_gains"][:3])
    draws = readme["draws"]
    return [f"The README's grid of the default sweep as measured at {label}, every variant measured, in "
            f"{draws:,} random item orders, rule point, floors 80/70/60/50%, alpha 0.05, one worker, "
            "baseline first. Largest gains of a quantized variant over its own baseline on any task: "
            f"{gains}. Grid winner {readme['grid_winner']}; eligible in the grid: "
            f"{', '.join(readme['grid_eligible'])}. "
            f"Skipped at the default margin (draws out of {draws:,}): "
            + ", ".join(f"{n} {c}" for n, c in sorted(readme["skipped"].items())) + "; the search's winner: "
            + ", ".join(f"{n} {c}" for n, c in readme["winners"].items()) + ". Compute per sweep "
            f"{off['cost'] / draws:.0f} s without the rule, {on['cost'] / draws:.0f} s with it "
            "(stated costs: loading 10 s + 4 s per GB, the grid's quantization seconds, one item 0.05 s + 0.25 s "
            "per billion parameters). Fidelity off, compute per sweep: smallest first "
            f"{readme['no_fidelity']['smallest first'] / draws:.0f} s, smallest first with the rule "
            f"{readme['no_fidelity']['smallest first + rule'] / draws:.0f} s, baseline first with the rule "
            f"{readme['no_fidelity']['baseline first + rule'] / draws:.0f} s (winner differs in "
            f"{readme['no_fidelity']['winner differs']:.0f})."]


def siblings_summary(r: dict) -> list[str]:
    pct = lambda x: f"{100 * x:.2f}%"  # noqa: E731

    def table(per_margin: dict, runs: int, what: str) -> list[str]:
        out = [f"| sibling_margin | skipped per {what} | grid-eligible variants skipped | winner differs from the "
               "grid's | compute cost vs the grid | quantization skipped per " + what + " |",
               "|---|---|---|---|---|---|"]  # fmt: skip
        for m, t in per_margin.items():
            label = "off" if m == "off" else f"{float(m):g}" + (" (default)" if float(m) == r["sibling_margin"] else "")
            out.append(f"| {label} | {t['skipped'] / runs:.2f} | {t['skipped_eligible']:.0f}/{t['eligible_siblings']:.0f}"
                       f" = {pct(t['skipped_eligible'] / max(t['eligible_siblings'], 1))} | "
                       f"{t['winner_differs']:.0f}/{runs} = {pct(t['winner_differs'] / runs)} | "
                       f"{pct(t['cost'] / t['grid_cost'])} | {t['quantize_s_skipped'] / runs:.0f} s |")
        return out

    stress, nf = r["stress"], r["no_fidelity"]
    lines = ["", "## Siblings of a failing baseline (search.sibling_margin)"]
    for label, readme in r["readme"].items():
        lines += ["", *stored_grid_paragraph(label, readme, r["sibling_margin"]), "",
                  *table(readme["per_margin"], readme["draws"], "sweep")]
    lines += ["",
             f"The simulation's randomised ladders ({r['sweeps']:,} sweeps as above, one worker):", "",
             *table(r["per_margin"], r["sweeps"], "sweep"), "",
             f"Ladders where quantization can gain ({stress['sweeps']:,} sweeps: each quantized copy's ability moves "
             "per task, sd 0.3 logits, and 2-30% of its 0/1 answers are re-drawn): gains of a quantized variant over "
             f"its baseline on a task reach {100 * stress['gain_max']:+.1f} points (median "
             f"{100 * stress['gain_quantiles'][0.5]:+.1f}, 99th percentile {100 * stress['gain_quantiles'][0.99]:+.1f}, "
             f"99.9th {100 * stress['gain_quantiles'][0.999]:+.1f}).", "",
             *table(stress["per_margin"], stress["sweeps"], "sweep"), "",
             f"Fidelity off (no reference to share; {nf['sweeps']:,} sweeps, one worker), compute per sweep: smallest "
             f"first {nf['smallest first'] / nf['sweeps']:.0f} s, smallest first with the rule "
             f"{nf['smallest first + rule'] / nf['sweeps']:.0f} s, baseline first with the rule "
             f"{nf['baseline first + rule'] / nf['sweeps']:.0f} s; winner differs between the first and the last in "
             f"{nf['winner differs']:.0f} sweeps."]
    return lines
