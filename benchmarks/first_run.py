"""The default sweep as a newcomer runs it: cold (empty model cache), then warm (the cache kept, a new
output folder), timed end to end, with the search's waves and where each variant's time went.

    python -m benchmarks.first_run                      # cold then warm, into a fresh temporary cache
    python -m benchmarks.first_run --max-load 0.5       # wait for a quiet machine first (recommended)
    python -m benchmarks.first_run --runs warm --cache DIR   # warm only, on a cache you already have

Each run is `python -m selector output_dir=<folder>` with `SELECTOR_CACHE=<cache>` and nothing else,
the README's `make run` after its install. Targets (issue 34): cold <= 25 min, warm <= 12 min on a
quiet 2-core machine, with the grid's winner (`--grid-winner`, default: the README's stored grid).
Writes benchmarks/results/first_run.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS_DIR, NeighbourCpu, load_average, machine_when_quiet, say, write_results

ROOT = Path(__file__).resolve().parent.parent
GRID_WINNER = "qwen2.5-coder-1.5b/gptq-int4"  # the README's stored grid of the default sweep


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.first_run", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", default="cold,warm", help="cold, warm or both, in that order")
    p.add_argument("--cache", type=Path, default=None, help="the model cache (default: a fresh temporary folder)")
    p.add_argument("--keep", type=Path, default=None, help="the sweeps' output folders go here (default: a temporary folder)")
    p.add_argument("--grid-winner", default=GRID_WINNER)
    p.add_argument("--max-load", type=float, default=None, help="wait until the 1-minute load is below this")
    p.add_argument("--wait-s", type=float, default=1800.0)
    p.add_argument("--out-dir", type=Path, default=RESULTS_DIR, help="where <stem>.{json,md} go")
    p.add_argument("--stem", default="first_run", help="the results' file name (another for another sweep: "
                   "--stem default_grid_run search=grid)")
    p.add_argument("--markdown-only", action="store_true", help="rewrite first_run.md from first_run.json")
    p.add_argument("overrides", nargs="*", help="selector overrides for both runs (none for the README's run)")
    return p.parse_args(argv)


def one_run(label: str, cache: Path, out: Path, overrides: list[str]) -> dict[str, Any]:
    from selector.records import RunRecord

    cmd = [sys.executable, "-m", "selector", f"output_dir={out}", *overrides]
    say(f"{label}: {' '.join(cmd[1:])} (SELECTOR_CACHE={cache})")
    out.mkdir(parents=True, exist_ok=True)
    neighbours = NeighbourCpu()
    load_start = load_average()
    t0 = time.monotonic()
    with (out / "console.log").open("w") as sink:
        done = subprocess.run(cmd, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT,
                              env={**os.environ, "SELECTOR_CACHE": str(cache)})
    wall = time.monotonic() - t0
    if done.returncode != 0:
        raise SystemExit(f"{label} run failed ({done.returncode}); see {out / 'console.log'}")
    [sweep] = sorted((out / "sweeps").iterdir(), key=lambda p: p.stat().st_mtime)[-1:]
    state = json.loads((sweep / "sweep.json").read_text())
    report = json.loads((sweep / "report" / "report.json").read_text())
    variants = []
    for raw in report["records"]:
        r = RunRecord.model_validate(raw)
        variants.append({"variant": r.name, "status": r.status, "reason": (r.reason or "")[:160],
                         "timings_s": {k: round(v, 1) for k, v in r.timings_s.items()}})
    search = state.get("search") or {}
    return {"label": label, "wall_s": round(wall, 1), "load_start": load_start, "load_end": load_average(),
            "others_busy_cores": neighbours.read()["others_busy_cores"], "winner": report["selection"]["winner"],
            "waves": search.get("waves", []), "workers": search.get("workers"), "variants": variants}


def stage_totals(run: dict[str, Any]) -> list[tuple[str, float]]:
    """Seconds per stage over the variants; `quantize` is part of `prepare` (and a warm run's record
    repeats the cached artifact's figure), so it is left out."""
    totals: dict[str, float] = defaultdict(float)
    for v in run["variants"]:
        for stage, s in v["timings_s"].items():
            if stage != "quantize":
                totals[stage] += s
    return sorted(totals.items(), key=lambda kv: -kv[1])


def markdown(data: dict[str, Any]) -> str:
    m = data["machine"]
    default = data["command"] == "python -m selector"  # the targets are the default sweep's
    lines = [f"# {'The default sweep' if default else data['command']}, cold and warm", "",
             f"- machine: {m.get('cpu', '')}, {m.get('cores', '')} cores; quiet check: {m.get('quiet_check', 'not asked')}",
             f"- command: `{data['command']}` (the cache: a folder of its own, empty before the cold run)",
             f"- the grid's winner (README's stored grid): {data['grid_winner']}", "",
             "| run | wall | target | winner | same as the grid | load average start / end | others' busy cores |",
             "|---|---|---|---|---|---|---|"]
    for run in data["runs"]:
        target = f"<= {data['targets_min'].get(run['label'])} min" if default else "(none)"
        lines.append(f"| {run['label']} | {run['wall_s'] / 60:.1f} min | {target} | {run['winner']} | "
                     f"{'yes' if run['winner'] == data['grid_winner'] else 'NO'} | {run['load_start'][0]:.2f} / "
                     f"{run['load_end'][0]:.2f} | {run['others_busy_cores']:.2f} |")
    for run in data["runs"]:
        lines += ["", f"## {run['label']}: the waves", "", "| wave | kind | variants | wall |", "|---|---|---|---|"]
        for i, w in enumerate(run["waves"], 1):
            lines.append(f"| {i} | {w.get('kind', '')} | {', '.join(w.get('names', []))} | {w.get('wall_s', 0):.0f} s |")
        lines += ["", f"## {run['label']}: where each variant's time went (seconds, the record's timings_s; "
                  "quantize is part of prepare, and in a warm run the cached artifact's own figure)", "",
                  "| variant | status | stages |", "|---|---|---|"]
        for v in run["variants"]:
            stages = ", ".join(f"{k} {s:g}" for k, s in sorted(v["timings_s"].items(), key=lambda kv: -kv[1]) if s >= 0.5)
            status = v["status"] + (f" ({v['reason']})" if v["reason"] else "")
            lines.append(f"| {v['variant']} | {status} | {stages} |")
        lines += ["", "Stage totals over the variants: "
                  + ", ".join(f"{k} {s:.0f} s" for k, s in stage_totals(run) if s >= 1) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.markdown_only:
        data = json.loads((args.out_dir / f"{args.stem}.json").read_text())
        (args.out_dir / f"{args.stem}.md").write_text(markdown(data), encoding="utf-8")
        return 0
    machine = machine_when_quiet(2, args.max_load, args.wait_s)
    cache = args.cache or Path(tempfile.mkdtemp(prefix="selector-cold-cache-"))
    runs = []
    outputs = args.keep or Path(tempfile.mkdtemp(prefix="selector-first-run-"))  # kept: the reports and logs
    for label in args.runs.split(","):
        runs.append(one_run(label, cache, outputs / label, args.overrides))
        say(f"{label}: {runs[-1]['wall_s'] / 60:.1f} min, winner {runs[-1]['winner']} (output in {outputs / label})")
    data = {"machine": machine, "command": " ".join(["python -m selector", *args.overrides]),
            "grid_winner": args.grid_winner, "targets_min": {"cold": 25, "warm": 12}, "runs": runs}
    json_path, md_path = write_results(args.stem, data, markdown(data), args.out_dir, str(cache))
    say(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
