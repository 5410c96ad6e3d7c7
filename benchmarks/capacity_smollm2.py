"""Capacity at the SLO of SmolLM2-135M at two precisions, on this machine, and the cheapest at a traffic.

    python -m benchmarks.capacity_smollm2 [--precisions bf16,int8] [--slo-ms 4000] [--traffic 20]
        [--cost-per-hour 0.5] [--max-load 1.5] [--out DIR]

Runs the sweep a user runs (`python -m selector model=smollm2-135m precision=bf16,int8 search=grid
measure=quick measure.load.capacity=true measure.load.requests=loadsets/sample.jsonl ...`), in-process
(engine=hf, the dynamic batching scheduler), with the packaged sample request file as the load set,
then reads every variant's record: capacity (req/s within p95 e2e <= the SLO), output tok/s and CPU
there, the search's probe steps and wall time, and the cost-at-traffic verdict. Writes
benchmarks/results/capacity_smollm2.{json,md}. The model comes from selector's cache (converted on
first use, about a minute).
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

from benchmarks.common import machine_when_quiet, write_results

ROOT = Path(__file__).resolve().parent.parent


def sweep_overrides(args: argparse.Namespace) -> list[str]:
    return [
        "model=smollm2-135m", f"precision={args.precisions}", "search=grid", "measure=quick",
        "measure.latency.enabled=false", "measure.throughput.enabled=false", "measure.fidelity=false",
        f"evalset.limit={args.limit}", f"threads={args.threads}", "tracker=none",
        "measure.load.capacity=true", "measure.load.requests=loadsets/sample.jsonl",
        f"measure.load.slo.e2e_ms_p95={args.slo_ms}", "measure.load.capacity_start_rps=1",
        "measure.load.capacity_tolerance=0.15", "measure.load.capacity_min_rps=0.25",
        "measure.load.capacity_max_steps=8", "measure.load.max_batch_size=8",
        f"policy.traffic_rps={args.traffic}", f"policy.cost_per_hour={args.cost_per_hour}",
        "policy.objective=cost_at_traffic", "evalset.tasks=[sentiment,arithmetic]",
        # floors at 0: a pure cost verdict (4 items a task measure no accuracy worth a floor)
        "policy.floors.sentiment=0", "policy.floors.arithmetic=0",
    ]


def run(args: argparse.Namespace, out: Path) -> tuple[float, Path]:
    cmd = [sys.executable, "-m", "selector", f"output_dir={out}", *sweep_overrides(args)]
    t0 = time.monotonic()
    log = out / "sweep.log"
    out.mkdir(parents=True, exist_ok=True)
    with log.open("w") as sink:
        done = subprocess.run(cmd, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, env={**os.environ})
    wall = time.monotonic() - t0
    if done.returncode != 0:
        raise SystemExit(f"sweep failed ({done.returncode}); see {log}:\n{log.read_text()[-3000:]}")
    [sweep] = sorted((out / "sweeps").iterdir(), key=lambda p: p.stat().st_mtime)[-1:]
    return wall, sweep


def summarize(sweep: Path) -> dict[str, Any]:
    report = json.loads((sweep / "report" / "report.json").read_text())
    variants = []
    for r in report["records"]:
        cap = (r.get("perf") or {}).get("capacity")
        if not cap:
            variants.append({"variant": f"{r['variant']['model']}/{r['variant']['precision']}", "status": r["status"]})
            continue
        variants.append({
            "variant": f"{r['variant']['model']}/{r['variant']['precision']}", "status": r["status"],
            "capacity_rps": cap["capacity_rps"], "failed_rps": cap["failed_rps"],
            "output_tokens_per_s": cap["output_tokens_per_s"], "cpu_util_pct": cap["cpu_util_pct"],
            "probes": len(cap["steps"]), "search_s": round(cap["wall_s"], 1),
            "requests_per_step": cap["requests_per_step"],
            "note": cap["note"],
            "steps": [{"rate_rps": s["rate_rps"], "passed": s["passed"],
                       "served_rps": s["level"]["request_throughput"],
                       "e2e_p95_ms": (s["level"].get("e2e_ms") or {}).get("p95"),
                       "ttft_p95_ms": (s["level"].get("ttft_ms") or {}).get("p95"),
                       "errors": s["level"]["errors"]} for s in cap["steps"]],
        })
    selection = report["selection"]
    return {"variants": variants, "winner": selection["winner"], "summary": selection["summary"]}


def markdown(data: dict[str, Any]) -> str:
    a = data["args"]
    lines = [f"# Capacity at p95 e2e <= {a['slo_ms'] / 1000:g} s: SmolLM2-135M on this machine", "",
             f"- machine: {data['machine'].get('cpu', '')}, {a['threads']} torch threads; load at start "
             f"{data['machine'].get('load_average_start', '')}",
             f"- quiet check before measuring: {data['machine'].get('quiet_check')}",
             f"- command: `{data['command']}`",
             f"- sweep wall time: {data['wall_s']:.0f} s ({data['wall_s'] / 60:.1f} min)", "",
             "| variant | capacity req/s | fails at | output tok/s | CPU | probes | search time |",
             "|---|---|---|---|---|---|---|"]
    for v in data["variants"]:
        if "capacity_rps" not in v:
            lines.append(f"| {v['variant']} | ({v['status']}) | | | | | |")
            continue
        cap = f"{v['capacity_rps']:.3g}" if v["capacity_rps"] else "none"
        lines.append(f"| {v['variant']} | {cap} | {v['failed_rps'] or '-'} | {v['output_tokens_per_s']:.3g} | "
                     f"{v['cpu_util_pct'] or 0:.0f}% | {v['probes']} | {v['search_s']:.0f} s |")
    lines += ["", "Probes (rate req/s: p95 e2e ms, within the SLO?):", ""]
    for v in data["variants"]:
        steps = ", ".join(f"{s['rate_rps']:.3g}: {s['e2e_p95_ms'] or float('nan'):.0f} {'ok' if s['passed'] else 'no'}"
                          for s in v.get("steps", []))
        lines.append(f"- {v['variant']}: {steps}")
    lines += ["", f"Verdict at {a['traffic']:g} req/s and ${a['cost_per_hour']:g}/machine-hour: {data['summary']}", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precisions", default="bf16,int8")
    parser.add_argument("--slo-ms", type=float, default=4000.0)
    parser.add_argument("--traffic", type=float, default=20.0)
    parser.add_argument("--cost-per-hour", type=float, default=0.5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--limit", type=int, default=4, help="eval items per task (the accuracy side is not the point)")
    parser.add_argument("--max-load", type=float, default=None, help="wait until the 1-minute load is below this")
    parser.add_argument("--wait-s", type=float, default=600.0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    machine = machine_when_quiet(args.threads, args.max_load, args.wait_s)
    with tempfile.TemporaryDirectory() as tmp:
        wall, sweep = run(args, args.out or Path(tmp))
        data = {"args": vars(args) | {"out": str(args.out) if args.out else None}, "machine": machine,
                "command": "python -m selector " + " ".join(sweep_overrides(args)), "wall_s": wall,
                **summarize(sweep)}
    json_path, md_path = write_results("capacity_smollm2", data, markdown(data))
    print(md_path.read_text())


if __name__ == "__main__":
    main()
