"""Does non-inferiority keep its level at the margin? (issue 22, point 2)

The true mean difference (variant - reference) is exactly -margin (5 points): the least favourable
case. How often is the variant declared non-inferior? Nominal: (1 - confidence) / 2 = 2.5%.

- 0/1 scores, exact: every (gained, lost) table of n pairs enumerated with its multinomial
  probability, for Tango's interval alone and for the rule the selection applies (Tango's interval
  and the exact unconditional test, selector.stats_paired). A sample of tables is checked against
  the selection's own `non_inferiority_check` so the enumeration decides as the selection does.
- 0/1 scores, the rule before issue 22 (the percentile bootstrap of the differences, seed 0, 2000
  resamples): simulated, 1,000 draws per cell.
- Fractional scores (token-F1-like): the betting interval (the rule now) against Student's t (tried
  first for this issue) and the percentile bootstrap (before), simulated through the selection's
  `paired_diff` and `non_inferiority_check`.

    python -m benchmarks.paired_coverage            # a few minutes on one core
    python -m benchmarks.paired_coverage --quick    # fewer cells and draws

Writes benchmarks/results/paired_coverage.{json,md}; exits 1 if the shipped rule's exact rate is
above the nominal level anywhere.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from scipy.special import gammaln, xlogy
from scipy.stats import ttest_1samp

from benchmarks.common import RESULTS_DIR
from benchmarks.tables import markdown_table
from selector.selection.checks import non_inferiority_check
from selector.selection.evidence import Evidence, paired_diff
from selector.stats import bootstrap_interval
from selector.stats_paired import noninferiority_exact_p, tango_interval
from selector.records import RunRecord, TaskResult, Variant

SEED = 20261201
MARGIN, CONFIDENCE = 0.05, 0.95
NOMINAL = (1 - CONFIDENCE) / 2


def _tables(n: int) -> tuple[np.ndarray, np.ndarray]:
    i, j = np.triu_indices(n + 1)
    return i, j - i


def exact_rates(n: int, discordances: list[float]) -> dict[float, dict[str, float]]:
    """P(declared non-inferior) at a true difference of -MARGIN, by enumeration of every table."""
    gained, lost = _tables(n)
    tango_ok = np.array([tango_interval(int(g), int(c), n, CONFIDENCE)[0] >= -MARGIN - 1e-9
                         for g, c in zip(gained, lost)])  # fmt: skip
    exact_ok = np.array([noninferiority_exact_p(int(g), int(c), n, MARGIN) <= NOMINAL + 1e-9
                         for g, c in zip(gained, lost)])  # fmt: skip
    out = {}
    for disc in discordances:
        p_gained, p_lost = (disc - MARGIN) / 2, (disc + MARGIN) / 2
        log_p = (gammaln(n + 1) - gammaln(gained + 1) - gammaln(lost + 1) - gammaln(n - gained - lost + 1)
                 + xlogy(gained, p_gained) + xlogy(lost, p_lost) + xlogy(n - gained - lost, 1 - disc))  # fmt: skip
        p = np.exp(log_p)
        out[disc] = {"tango": float(p[tango_ok].sum()), "shipped": float(p[tango_ok & exact_ok].sum())}
    return out


def _record(name: str, scores: np.ndarray, metric: str) -> RunRecord:
    items = {f"i{k}": float(s) for k, s in enumerate(scores)}
    result = TaskResult(task="t", metric=metric, value=float(np.mean(scores)), ci_low=0.0, ci_high=1.0,
                        n=len(scores), item_scores=items)  # fmt: skip
    model, precision = name.split("/")
    return RunRecord(key=name, variant=Variant(model=model, precision=precision), status="completed", tasks={"t": result})


def selection_declares(variant: np.ndarray, reference: np.ndarray, metric: str) -> bool:
    """The selection's own non-inferiority check on one pair of score vectors."""
    v, r = _record("m/int8", variant, metric), _record("m/bf16", reference, metric)
    diff = paired_diff(v.tasks["t"], r.tasks["t"], CONFIDENCE, 2000, 0)
    ev = Evidence(v, paired={"t": diff})
    return non_inferiority_check(ev, "t", MARGIN, "m/bf16", CONFIDENCE).passed


def check_against_selection(n: int, rng: np.random.Generator, samples: int = 40) -> int:
    """Tables decided by the enumeration's rule and by the selection itself: the count that agree."""
    agree = 0
    for _ in range(samples):
        lost = int(rng.integers(0, n // 3))
        gained = int(rng.integers(0, max(1, lost)))
        v = np.r_[np.ones(gained), np.zeros(lost), np.ones(n - gained - lost)]
        r = np.r_[np.zeros(gained), np.ones(lost), np.ones(n - gained - lost)]
        mine = (tango_interval(gained, lost, n, CONFIDENCE)[0] >= -MARGIN - 1e-9
                and noninferiority_exact_p(gained, lost, n, MARGIN) <= NOMINAL + 1e-9)  # fmt: skip
        agree += mine == selection_declares(v, r, "exact_match")
    return agree


def bootstrap_rate(n: int, disc: float, draws: int, rng: np.random.Generator) -> float:
    """The rule before issue 22: percentile bootstrap of the paired differences (seed 0, 2000)."""
    probs = [(disc - MARGIN) / 2, (disc + MARGIN) / 2, 1 - disc]
    hits = 0
    for _ in range(draws):
        g, c, _ = rng.multinomial(n, probs)
        d = np.r_[np.ones(g), -np.ones(c), np.zeros(n - g - c)]
        hits += bootstrap_interval(d, CONFIDENCE, 2000, 0)[0] >= -MARGIN - 1e-9
    return hits / draws


def fractional_pairs(n: int, change: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Token-F1-like reference scores (30% 1.0, 15% 0.0, the rest uniform); the variant keeps each
    score, or with probability w degrades it to r x U(0, 1) (mean drop r / 2). w is set so the
    expected difference is exactly -MARGIN: w = MARGIN / E[r / 2] (E[r] = 0.3 + 0.55 / 2)."""
    kind = rng.random(n)
    r = np.where(kind < 0.3, 1.0, np.where(kind < 0.45, 0.0, rng.random(n)))
    degrade = rng.random(n) < change
    v = np.where(degrade, r * rng.random(n), r)
    return v, r


def fractional_rates(n: int, draws: int, rng: np.random.Generator) -> dict[str, float]:
    w = MARGIN / ((0.3 + 0.55 / 2) / 2)  # 17.4% of items degraded, mean drop exactly 5 points
    now = before = student = 0
    for _ in range(draws):
        v, r = fractional_pairs(n, w, rng)
        now += selection_declares(v, r, "f1")
        before += bootstrap_interval(v - r, CONFIDENCE, 2000, 0)[0] >= -MARGIN - 1e-9
        student += ttest_1samp(v - r, 0.0).confidence_interval(CONFIDENCE).low >= -MARGIN - 1e-9
    return {"betting (now)": now / draws, "bootstrap (before)": before / draws, "student t": student / draws,
            "degraded share": w}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    start = time.process_time()
    rng = np.random.default_rng(SEED)
    sizes = [40, 48, 100] if args.quick else [40, 42, 44, 46, 48, 60, 100, 200]
    discs = [0.10, 0.15, 0.20, 0.25, 0.40, 0.48]
    draws = 200 if args.quick else 1000
    exact = {n: exact_rates(n, discs) for n in sizes}
    agree = {n: check_against_selection(n, rng) for n in (42, 48)}
    boot = {(n, d): bootstrap_rate(n, d, draws, rng) for n in (48, 100) for d in discs[:4]}
    frac = {n: fractional_rates(n, draws * 2, rng) for n in (40, 48, 100, 200)}
    worst = max(v["shipped"] for by in exact.values() for v in by.values())
    worst_tango = max(v["tango"] for by in exact.values() for v in by.values())
    data = {"seed": SEED, "draws": draws, "margin": MARGIN, "confidence": CONFIDENCE, "nominal": NOMINAL,
            "exact": {str(n): {str(d): v for d, v in by.items()} for n, by in exact.items()},
            "selection_agrees": {str(n): f"{a}/40" for n, a in agree.items()},
            "bootstrap_before": {f"{n}@{d}": v for (n, d), v in boot.items()},
            "fractional": {str(n): v for n, v in frac.items()}, "worst_shipped": worst, "worst_tango": worst_tango,
            "cpu_s": round(time.process_time() - start, 1)}  # fmt: skip
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "paired_coverage.json").write_text(json.dumps(data, indent=2) + "\n")
    (RESULTS_DIR / "paired_coverage.md").write_text(markdown(data, exact, boot, frac, discs))
    print(f"worst exact rate: shipped {worst:.4f}, Tango alone {worst_tango:.4f} (nominal {NOMINAL})")
    return 0 if worst <= NOMINAL + 1e-12 else 1


def markdown(data, exact, boot, frac, discs) -> str:  # type: ignore[no-untyped-def]
    pct = lambda x: f"{100 * x:.2f}%"  # noqa: E731
    rows = [[n, *(f"{pct(by[d]['shipped'])} ({pct(by[d]['tango'])})" for d in discs)] for n, by in exact.items()]
    exact_md = markdown_table(["n", *(f"{100 * d:.0f}% discordant" for d in discs)], rows)
    boot_md = markdown_table(["n", *(f"{100 * d:.0f}% discordant" for d in discs[:4])],
                             [[n, *(pct(boot[(n, d)]) for d in discs[:4])] for n in (48, 100)])  # fmt: skip
    frac_md = markdown_table(["n", "betting interval (now)", "percentile bootstrap (before)", "Student's t"],
                             [[n, pct(v["betting (now)"]), pct(v["bootstrap (before)"]), pct(v["student t"])]
                              for n, v in frac.items()])  # fmt: skip
    return f"""# Non-inferiority at the margin

True difference exactly -{100 * MARGIN:.0f} points, confidence {CONFIDENCE} (one-sided nominal
{pct(NOMINAL)}); seed {SEED}; {data['cpu_s']} CPU seconds. Produced by `python -m benchmarks.paired_coverage`.

## 0/1 scores, exact: P(declared non-inferior) under the selection's rule (in brackets: Tango's interval alone)

{exact_md}

Worst: {pct(data['worst_shipped'])} with the exact test, {pct(data['worst_tango'])} with Tango's interval
alone. The enumeration's rule agrees with `non_inferiority_check` on
{', '.join(f"{v} sampled tables at n = {n}" for n, v in data['selection_agrees'].items())}.

## 0/1 scores, the rule before issue 22 (percentile bootstrap), simulated ({data['draws']} draws a cell; fractional: {2 * data['draws']})

{boot_md}

## Fractional scores (token-F1-like, {pct(next(iter(frac.values()))['degraded share'])} of items degraded), simulated through the selection

{frac_md}
"""


if __name__ == "__main__":
    sys.exit(main())
