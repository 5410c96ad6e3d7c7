"""Capacity at the SLO of SmolLM2-135M on vLLM's CPU build, by rate and by concurrency, each with
its interval from repeated runs, and the cost of a traffic on it: the result a planner reads.

    python -m benchmarks.capacity_vllm                       # bf16, int8-w8a8, gptq-int4; p95 e2e <= 2 s; 10 req/s
    python -m benchmarks.capacity_vllm --max-load 0.5        # wait for a quiet machine first (recommended)
    python -m benchmarks.capacity_vllm --model tinyv --precisions bf16 --enforce-eager --repeats 2 \\
        --out-dir /tmp/capacity hydra.searchpath=[file:///path/to/conf]     # a quick check on a tiny model

Runs the sweep a user runs (`python -m selector model=smollm2-135m precision=bf16,int8-w8a8,gptq-int4
engine=vllm search=grid measure=quick measure.load.capacity=true measure.load.capacity_on=both
measure.load.slo.e2e_ms_p95=2000 policy.traffic_rps=10 policy.cost_per_hour=1 policy.objective=cost_at_traffic
...`; vLLM compiled, as deployed), then reads every variant's record: the capacity by rate and by
concurrency with its interval, each run's crossing, the probes and their time, the over-saturated
probes, the cost per month and per million input, output and total tokens at the traffic, and the
recommendation sentence as the sweep printed it; with the machine's load before, during (other
processes' busy cores) and after. Writes benchmarks/results/capacity_vllm-<model>.{json,md}.
The quantized checkpoints come from selector's cache (quantized on first use: GPTQ and W8A8 take a
few minutes for SmolLM2-135M).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import (RESULTS_DIR, NeighbourCpu, load_average, machine_lines, machine_when_quiet, run_sweep,
                               say, write_results)

ROOT = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.capacity_vllm", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m", help="a selector model config name")
    p.add_argument("--precisions", default="bf16,int8-w8a8,gptq-int4")
    p.add_argument("--slo-ms", type=float, default=2000.0, help="the limit on p95 e2e")
    p.add_argument("--traffic", type=float, default=10.0, help="policy.traffic_rps")
    p.add_argument("--cost-per-hour", type=float, default=1.0, help="policy.cost_per_hour, USD per machine-hour")
    p.add_argument("--repeats", type=int, default=None, help="measure.load.capacity_repeats (default: selector's)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--limit", type=int, default=4, help="eval items per task (the accuracy side is not the point)")
    p.add_argument("--capacity-on", default="both", choices=["rate", "concurrency", "both"],
                   help="measure.load.capacity_on")
    p.add_argument("--confirm-s", type=float, default=600.0,
                   help="measure.load.confirm_s: the planned rate run this long after the search (0: none)")
    p.add_argument("--stem", default=None, help="results/<stem>.{json,md} (default capacity_vllm-<model>)")
    p.add_argument("--requests", default=None, help="measure.load.requests: a request file or Mooncake-style trace")
    p.add_argument("--enforce-eager", action="store_true", help="skip vLLM's compile (quick checks, not measurements)")
    p.add_argument("--max-load", type=float, default=None, help="wait until the 1-minute load is below this")
    p.add_argument("--wait-s", type=float, default=1800.0)
    p.add_argument("--out-dir", type=Path, default=RESULTS_DIR, help="where the results go")
    p.add_argument("--keep", type=Path, default=None, help="keep the sweep's output folder here")
    p.add_argument("overrides", nargs="*", help="more selector overrides, e.g. cache_dir=/data/cache")
    return p.parse_args(argv)


def sweep_overrides(args: argparse.Namespace) -> list[str]:
    out = [f"model={args.model}", f"precision={args.precisions}", "engine=vllm", "search=grid", "measure=quick",
           "measure.latency.enabled=false", "measure.throughput.enabled=false", "measure.fidelity=false",
           f"evalset.limit={args.limit}", f"threads={args.threads}", "tracker=none",
           "measure.load.capacity=true", f"measure.load.capacity_on={args.capacity_on}",
           f"measure.load.confirm_s={args.confirm_s:g}", f"measure.load.slo.e2e_ms_p95={args.slo_ms:g}",
           f"policy.traffic_rps={args.traffic:g}", f"policy.cost_per_hour={args.cost_per_hour:g}",
           "policy.objective=cost_at_traffic", "evalset.tasks=[sentiment,arithmetic]",
           # floors at 0: a pure cost verdict (a few items a task measure no accuracy worth a floor)
           "policy.floors.sentiment=0", "policy.floors.arithmetic=0"]
    if args.repeats is not None:
        out.append(f"measure.load.capacity_repeats={args.repeats}")
    if args.requests:
        out.append(f"measure.load.requests={args.requests}")
    if args.enforce_eager:
        out.append("engine.vllm.enforce_eager=true")
    return out + list(args.overrides)


def run(args: argparse.Namespace, out: Path) -> tuple[float, Path, str]:
    return run_sweep(sweep_overrides(args), out)


def search_figures(cap: dict[str, Any]) -> dict[str, Any]:
    steps = cap["steps"]
    return {
        "on": cap.get("on", "rate"), "capacity_rps": cap["capacity_rps"], "capacity_concurrency": cap.get("capacity_concurrency"),
        "low": cap.get("low"), "high": cap.get("high"), "low_rps": cap.get("low_rps"), "runs": cap.get("runs", []),
        "straddles": cap.get("straddles", []), "probes": len(steps), "search_s": round(cap["wall_s"], 1),
        "saturated_probes": sum(1 for s in steps if s.get("stopped")), "requests_per_step": cap["requests_per_step"],
        "output_tokens_per_s": cap["output_tokens_per_s"], "cpu_util_pct": cap["cpu_util_pct"],
        "input_tokens_per_request": cap.get("input_tokens_per_request"),
        "output_tokens_per_request": cap.get("output_tokens_per_request"), "note": cap["note"],
        "probe_s": cap.get("probe_s"), "warmup_s": cap.get("warmup_s"), "confirmation": confirmation(cap),
        "steps": [{"level": s.get("rate_rps") or s.get("concurrency"), "run": s.get("repeat", 0), "passed": s["passed"],
                   "served_rps": s["level"]["request_throughput"],
                   "e2e_p95_ms": (s["level"].get("e2e_ms") or {}).get("p95"),
                   "prefix_cache_hit_rate": s["level"].get("prefix_cache_hit_rate"),
                   "stopped": s.get("stopped", ""), "errors": s["level"]["errors"]} for s in steps],
    }


def confirmation(cap: dict[str, Any]) -> dict[str, Any] | None:
    """The planned rate, run after the search: its rate, length, judged figures and whether it held."""
    c = cap.get("confirmation")
    if not c:
        return None
    lv = c["level"]
    return {"rate_rps": c["rate_rps"], "window_s": c["window_s"], "warmup_s": c["warmup_s"], "held": c["held"],
            "margin": c.get("margin"), "checks": c.get("checks", {}), "judged_requests": c.get("judged_requests"),
            "requests": lv["requests"], "errors": lv["errors"], "served_rps": lv["request_throughput"],
            "prefix_cache_hit_rate": lv.get("prefix_cache_hit_rate"), "stopped": c.get("stopped", ""),
            "note": c.get("note", "")}


def summarize(sweep: Path, policy: dict[str, Any]) -> dict[str, Any]:
    from selector.config import PolicyConfig
    from selector.records import RunRecord
    from selector.selection.cost import record_cost

    report = json.loads((sweep / "report" / "report.json").read_text())
    price = PolicyConfig(**policy)
    variants = []
    for raw in report["records"]:
        record = RunRecord.model_validate(raw)
        perf = raw.get("perf") or {}
        entry: dict[str, Any] = {"variant": record.name, "status": record.status, "reason": record.reason,
                                 "served_as": (raw.get("serving") or {}).get("quantization") or "unquantized",
                                 "kernels": (raw.get("serving") or {}).get("kernels", [])}
        for on in ("capacity", "capacity_concurrency"):
            if perf.get(on):
                entry[on] = search_figures(perf[on])
        cost = record_cost(record, price)
        if cost is not None:
            entry["cost"] = {"planned_on": cost.planned_on, "capacity_rps": cost.capacity_rps,
                             "instances": cost.instances, "per_month": cost.cost_per_month,
                             "per_million_input": cost.per_million_input, "per_million_output": cost.per_million_output,
                             "per_million_total": cost.per_million_total}
        variants.append(entry)
    confidence = next((c["confidence"] for r in report["records"] for c in ((r.get("perf") or {}).get("capacity"),
                       (r.get("perf") or {}).get("capacity_concurrency")) if c), 0.95)
    return {"variants": variants, "winner": report["selection"]["winner"], "summary": report["selection"]["summary"],
            "confidence": confidence}


def fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def money(x: float | None) -> str:
    return "-" if x is None else (f"${x:,.0f}" if x >= 100 else f"${x:,.2f}")


def markdown(data: dict[str, Any]) -> str:
    a = data["args"]
    lines = [f"# Capacity at p95 e2e <= {a['slo_ms'] / 1000:g} s: {a['model']} on vLLM (CPU)", "",
             *machine_lines(data, f"{a['threads']} threads for vLLM"),
             f"- vLLM {'eager (--enforce-eager: a check, not a measurement)' if a['enforce_eager'] else 'compiled'}",
             f"- command: `{data['command']}`",
             f"- sweep wall time: {data['wall_s']:.0f} s ({data['wall_s'] / 60:.1f} min)", "",
             f"| variant | served as | by | capacity | {data['confidence']:.0%} interval | runs' crossings | "
             "probes (over-saturated) | search time |", "|---|---|---|---|---|---|---|---|"]
    probe = next((c for v in data["variants"] for c in (v.get("capacity"), v.get("capacity_concurrency"))
                  if c and c.get("probe_s")), None)
    if probe:
        lines.insert(len(lines) - 3, f"- each probe: {probe['warmup_s']:g} s of warm-up, then a {probe['probe_s']:g} s "
                     f"judged window (at least {probe['requests_per_step']} requests judged), fresh prefix-cache salts")
    for v in data["variants"]:
        for on in ("capacity", "capacity_concurrency"):
            c = v.get(on)
            if c is None:
                continue
            unit = "req/s" if c["on"] == "rate" else "in flight"
            value = c["capacity_rps"] if c["on"] == "rate" else c["capacity_concurrency"]
            held = f"{fmt(value)} {unit}" if value is not None else "none"
            if "is at least" in (c.get("note") or ""):  # no probe broke the SLO: a floor, not the capacity
                held = "at least " + held
            if c["on"] == "concurrency" and c["capacity_rps"]:
                held += f" ({fmt(c['capacity_rps'])} req/s)"
            interval = f"{fmt(c['low'])} - {fmt(c['high'])}" if c["low"] is not None else "-"
            lines.append(f"| {v['variant']} | {v['served_as']} | {c['on']} | {held} | {interval} | "
                         f"{', '.join(fmt(x) for x in c['runs']) or '-'} | {c['probes']} ({c['saturated_probes']}) | "
                         f"{c['search_s']:.0f} s |")
    lines += ["", f"Cost at {a['traffic']:g} req/s and ${a['cost_per_hour']:g} per machine-hour (machines planned on "
              "the capacity's lower bound; per million tokens of each kind: the monthly cost over that kind's tokens):",
              "", "| variant | planned on | machines | per month | per M input | per M output | per M tokens |",
              "|---|---|---|---|---|---|---|"]
    for v in data["variants"]:
        c = v.get("cost")
        if c is None:
            lines.append(f"| {v['variant']} | ({v['status']}{': ' + v['reason'] if v['reason'] else ''}) | | | | | |")
            continue
        lines.append(f"| {v['variant']} | {c['planned_on']}, {fmt(c['capacity_rps'])} req/s | {c['instances']} | "
                     f"{money(c['per_month'])} | {money(c['per_million_input'])} | {money(c['per_million_output'])} | "
                     f"{money(c['per_million_total'])} |")
    lines += ["", "Probes (level/run: p95 e2e ms, within?, prefix-cache hits; run 0 located the boundary, runs 1+ "
              "repeated it):", ""]
    for v in data["variants"]:
        for on in ("capacity", "capacity_concurrency"):
            c = v.get(on)
            if c is None:
                continue
            shown = ", ".join(f"{fmt(s['level'])}/{s['run']}: {fmt(s['e2e_p95_ms'], 4)} {'ok' if s['passed'] else 'no'}"
                              + (" (over-saturated)" if s["stopped"] else "")
                              + ("" if s["prefix_cache_hit_rate"] is None else f" {s['prefix_cache_hit_rate']:.1%}")
                              for s in c["steps"])
            lines.append(f"- {v['variant']} by {c['on']}: {shown}" + (f". {c['note']}" if c["note"] else ""))
    confirmed = [(v["variant"], c["confirmation"]) for v in data["variants"]
                 for c in (v.get("capacity"), v.get("capacity_concurrency")) if c and c.get("confirmation")]
    if confirmed:
        lines += ["", "The plan, tried: the planned rate (the lower bound's req/s) run after the search, judged after "
                  "its warm-up like a probe (estimate + rise across the window, against the limit):", "",
                  "| variant | rate | judged window | requests judged (errors) | served req/s | p95 e2e | rise | "
                  "prefix-cache hits | held |", "|---|---|---|---|---|---|---|---|---|"]
        for name, c in confirmed:
            check = next(iter(c["checks"].values()), {})
            lines.append(f"| {name} | {fmt(c['rate_rps'])} req/s | {c['window_s']:g} s after {c['warmup_s']:g} s | "
                         f"{c['judged_requests']} ({c['errors']}) | {fmt(c['served_rps'])} | "
                         f"{fmt(check.get('estimate'), 4)} ms | {fmt(check.get('rise'), 3)} ms | "
                         f"{'-' if c['prefix_cache_hit_rate'] is None else format(c['prefix_cache_hit_rate'], '.1%')} | "
                         f"{'yes' if c['held'] else 'no'}{': ' + c['note'] if c['note'] else ''} |")
    lines += ["", f"The recommendation as the sweep printed it: {data['summary']}", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    machine = machine_when_quiet(args.threads, args.max_load, args.wait_s)
    before, neighbours = load_average(), NeighbourCpu()
    with tempfile.TemporaryDirectory() as tmp:
        wall, sweep, printed = run(args, args.keep or Path(tmp))
        policy = {"traffic_rps": args.traffic, "cost_per_hour": args.cost_per_hour, "objective": "cost_at_traffic"}
        data = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}, "machine": machine,
                "load_before": before, "neighbours": neighbours.read(), "load_after": load_average(),
                "command": "python -m selector " + " ".join(sweep_overrides(args)), "wall_s": wall,
                "printed": printed[-4000:], **summarize(sweep, policy)}
    stem = args.stem or f"capacity_vllm-{args.model}"
    cache_dir = next((o.split("=", 1)[1] for o in args.overrides if o.startswith("cache_dir=")), None)
    if args.keep:  # committed results name no local folder
        data["args"]["keep"] = "<output>"
        data["printed"] = data["printed"].replace(str(args.keep), "<output>")
    json_path, md_path = write_results(stem, data, markdown(data), out_dir=args.out_dir, cache_dir=cache_dir)
    print(md_path.read_text())
    say(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
