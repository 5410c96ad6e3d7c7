"""Adaptive search against the full grid, on one machine, side by side, same cache state.

    python benchmarks/adaptive_vs_grid.py [--cases default,strict,support] [--cold] [--out DIR]

For each case it runs `python -m selector search=grid ...` and `python -m selector ...` (adaptive, the
default) into separate output folders over the same model cache, and records wall time, items
scored, variants materialized (loaded at least once) and the verdict of each, then checks that the
verdicts agree:
- default: the default sweep (3 ladder models x bf16, int8, awq-int4, gptq-int4) with the default
  eval set's floors;
- strict: the same sweep with arithmetic and code floors of 70% under rule lower_bound (the grid's
  verdict is re-selected from the default grid sweep's records, as `select --from` does; the
  adaptive search runs anew with those floors);
- support: benchmarks/evalsets/support, 320 items over 4 tasks shaped like a support desk's.
--cold runs the default case first on two empty caches (conversions and quantizations included),
then everything warm on the grid's cache. From the grid's own per-variant timings it also
simulates how much of the saving survives with 1, 2 and 4 workers (waves, see docs/search.md).
Writes benchmarks/results/adaptive_vs_grid.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
STRICT = ["policy.rule=lower_bound", "policy.floors.arithmetic=0.7", "policy.floors.code=0.7"]
CASES = {
    "default": [],
    "strict": STRICT,
    "support": [f"evalset.path={ROOT / 'benchmarks' / 'evalsets' / 'support'}", "evalset.name=support"],
}


def run_sweep(out: Path, cache: Path, overrides: list[str], log: Path) -> dict[str, Any]:
    """One sweep as a user runs it; its wall time and what its folder says."""
    cmd = [sys.executable, "-m", "selector", f"output_dir={out}", f"cache_dir={cache}", *overrides]
    t0 = time.monotonic()
    with log.open("w") as sink:
        done = subprocess.run(cmd, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, env={**os.environ})
    wall = time.monotonic() - t0
    if done.returncode != 0:
        raise SystemExit(f"sweep failed ({done.returncode}): {' '.join(cmd)}; see {log}")
    [sweep] = sorted((out / "sweeps").iterdir(), key=lambda p: p.stat().st_mtime)[-1:]
    return {"wall_s": round(wall, 1), "command": " ".join(["python -m selector", *overrides]), **read_sweep(sweep)}


def read_sweep(sweep: Path) -> dict[str, Any]:
    report = json.loads((sweep / "report" / "report.json").read_text())
    records = report["records"]
    measured = [r for r in records if r["status"] in ("completed", "stopped", "failed")]
    return {
        "sweep_dir": str(sweep),
        "winner": report["selection"]["winner"],
        "verdicts": {v["variant"]: v["status"] for v in report["selection"]["verdicts"]},
        "items_scored": sum((r.get("search") or {}).get("items_evaluated", 0) - (r.get("search") or {}).get("items_reused", 0)
                            for r in measured),
        "items_total": sum((r.get("search") or {}).get("items_total", 0) for r in measured),
        "variants_materialized": sum(r["status"] != "stopped" or (r.get("timings_s") or {}).get("load") is not None
                                     for r in measured),
        "variants": len(records),
        "per_variant_s": {r["variant"]["model"] + "/" + r["variant"]["precision"]:
                          round(sum(v for k, v in (r.get("timings_s") or {}).items() if k != "quantize"), 1)
                          for r in measured},
        "other_cpu_share_max": max(((r.get("environment") or {}).get("machine_load") or {}).get("other_cpu_share") or 0.0
                                   for r in records),
    }


def reselect(sweep: Path, overrides: list[str], log: Path) -> str | None:
    """The grid's verdict under other floors, from its records (no model is touched)."""
    out = sweep / "reselect"
    cmd = [sys.executable, "-m", "selector", "select", "--from", str(sweep), "--out", str(out), *overrides]
    with log.open("w") as sink:
        subprocess.run(cmd, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, check=True)
    return json.loads((out / "report.json").read_text())["selection"]["winner"]


def waves(grid: dict[str, Any], adaptive: dict[str, Any], workers: int) -> dict[str, float]:
    """The adaptive search replayed with `workers` at once over the grid's recorded costs: waves
    in the search's order; a variant the adaptive run stopped costs what it cost there."""
    from selector.search.candidates import Candidate, Outcome
    from selector.search.driver import SearchDriver

    state = json.loads((Path(adaptive["sweep_dir"]) / "sweep.json").read_text())
    planned = {v["name"]: v for v in state["variants"]}
    cost = {**grid["per_variant_s"], **{n: s for n, s in adaptive["per_variant_s"].items()
                                         if adaptive["verdicts"].get(n) == "stopped"}}
    driver = SearchDriver([Candidate(n, v["planned_bytes"], v["model"], v["needs_quantization"], v["is_baseline"])
                           for n, v in planned.items()], workers=workers)
    weights = {n: planned[n]["planned_bytes"] for n in planned}
    wall = compute = 0.0
    while not driver.done:
        wave = driver.next_wave()
        if wave is None:
            break
        costs = [cost.get(n, 0.0) for n in wave.names]
        wall, compute = wall + max(costs), compute + sum(costs)
        for n in wave.names:
            verdict = grid["verdicts"].get(n, "failed")
            if adaptive["verdicts"].get(n) == "stopped" and not wave.full:
                driver.report(n, Outcome("stopped"))
            elif verdict in ("winner", "eligible"):
                driver.report(n, Outcome("eligible", measured=weights[n]))
            else:
                driver.report(n, Outcome("rejected" if verdict == "rejected" else "failed"))
    grid_compute = sum(grid["per_variant_s"].values())
    return {"workers": workers, "wall_s": round(wall, 1), "compute_s": round(compute, 1),
            "grid_compute_s": round(grid_compute, 1), "grid_wall_s": round(grid_compute / workers, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="default,strict,support")
    parser.add_argument("--cold", action="store_true", help="first run the default case on two empty caches")
    parser.add_argument("--cache", type=Path, help="the warm cache (default: SELECTOR_CACHE or ~/.cache/selector)")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "selector-adaptive-bench")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    cache = args.cache or Path(os.environ.get("SELECTOR_CACHE", Path.home() / ".cache" / "selector"))
    results: dict[str, Any] = {"machine": _machine(), "cases": {}}
    if args.cold:
        cold = {}
        for mode, extra in (("adaptive", []), ("grid", ["search=grid"])):
            empty = args.out / f"cache-cold-{mode}"
            cold[mode] = run_sweep(args.out / f"cold-{mode}", empty, extra, args.out / f"cold-{mode}.log")
            print(f"cold {mode}: {cold[mode]['wall_s'] / 60:.1f} min, winner {cold[mode]['winner']}", flush=True)
        cold["same_verdict"] = cold["adaptive"]["winner"] == cold["grid"]["winner"]
        results["cold"] = cold
        cache = args.out / "cache-cold-grid"  # warm from here on: everything the grid needed is in it
    grid_default = None
    for case in args.cases.split(","):
        overrides = CASES[case]
        entry: dict[str, Any] = {"overrides": overrides}
        if case == "strict" and grid_default is not None:
            entry["grid"] = {"winner": reselect(Path(grid_default["sweep_dir"]), overrides, args.out / "strict-select.log"),
                             "how": "select --from the default grid sweep"}
        else:
            entry["grid"] = run_sweep(args.out / f"{case}-grid", cache, ["search=grid", *overrides],
                                      args.out / f"{case}-grid.log")
        entry["adaptive"] = run_sweep(args.out / f"{case}-adaptive", cache, overrides, args.out / f"{case}-adaptive.log")
        entry["same_verdict"] = entry["adaptive"]["winner"] == entry["grid"]["winner"]
        if "per_variant_s" in entry["grid"]:
            entry["workers"] = [waves(entry["grid"], entry["adaptive"], w) for w in (1, 2, 4)]
        if case == "default":
            grid_default = entry["grid"]
        results["cases"][case] = entry
        print(f"{case}: grid {entry['grid'].get('wall_s', 0) / 60:.1f} min -> {entry['grid']['winner']}; adaptive "
              f"{entry['adaptive']['wall_s'] / 60:.1f} min -> {entry['adaptive']['winner']}", flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "adaptive_vs_grid.json").write_text(json.dumps(results, indent=2))
    (RESULTS / "adaptive_vs_grid.md").write_text(markdown(results))
    print(markdown(results))
    return 0 if all(c["same_verdict"] for c in results["cases"].values()) else 1


def _machine() -> dict[str, Any]:
    import platform

    import psutil

    return {"cpus": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "processor": platform.processor() or platform.machine(), "date": time.strftime("%Y-%m-%d")}


def markdown(results: dict[str, Any]) -> str:
    lines = ["# Adaptive search vs the full grid", "",
             f"Machine: {results['machine']['cpus']} CPUs, {results['machine']['memory_gib']} GiB, "
             f"{results['machine']['date']}. Same model cache for both modes of a case.", "",
             "| case | mode | wall | items scored | variants materialized | winner | same verdict |",
             "|---|---|---|---|---|---|---|"]
    rows = [("cold default", results["cold"]) ] if "cold" in results else []
    rows += [(name, case) for name, case in results["cases"].items()]
    for name, case in rows:
        for mode in ("grid", "adaptive"):
            r = case[mode]
            wall = f"{r['wall_s'] / 60:.1f} min" if "wall_s" in r else r.get("how", "")
            items = f"{r['items_scored']} / {r['items_total']}" if "items_scored" in r else ""
            mat = f"{r['variants_materialized']} / {r['variants']}" if "variants" in r else ""
            lines.append(f"| {name} | {mode} | {wall} | {items} | {mat} | {r['winner']} | "
                         f"{'yes' if case['same_verdict'] else 'NO'} |")
    for name, case in results["cases"].items():
        if case.get("workers"):
            lines += ["", f"Waves with several workers, {name} case (replayed over the grid's own per-variant times):",
                      "", "| workers | adaptive wall | grid wall | adaptive compute | grid compute |", "|---|---|---|---|---|"]
            for w in case["workers"]:
                lines.append(f"| {w['workers']} | {w['wall_s'] / 60:.1f} min | {w['grid_wall_s'] / 60:.1f} min | "
                             f"{w['compute_s'] / 60:.1f} min | {w['grid_compute_s'] / 60:.1f} min |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
