"""Answers under load: how many of a served model's answers change between one request at a time
and eight in flight, and whether its accuracy moves with them (docs/load-testing.md, "Answers under
load").

    python -m benchmarks.answers_under_load                      # SmolLM2-135M bf16 and gptq-int4 on vLLM (CPU)
    python -m benchmarks.answers_under_load --max-load 0.5       # wait for a quiet machine first (recommended)
    python -m benchmarks.answers_under_load --evalsets default --limit 4 --engine scripted-moving \\
        --out-dir /tmp/answers hydra.searchpath=[file:///path/to/conf]    # a quick check without a model

Runs the sweep a user runs, once per eval set (the default one, and benchmarks/evalsets/support,
shaped like a user's own): `python -m selector model=smollm2-135m precision=bf16,gptq-int4
engine=vllm search=grid measure=load 'measure.load.concurrency=[1,2,4,8]' ...`, with each level
sending every generation item of the eval set once (measure.load.requests_per_level = the
generation items; --requests to change) and measure.load.new_tokens at the longest task's answer
length, so that every task's answers are scored (the default set's code answers, 160 tokens, run in
the sandbox: --new-tokens 32 leaves code out). Then reads every variant's record: per eval set,
variant and level, the answers that differ from the same variant's answers at rest (count and
share), the level's paired p-value (Holm over its tasks), and per task the accuracy under load
against the same items at rest with its paired test (McNemar's exact test on 0/1 scores), a few
changed answers, and the verdict's warnings about answers under load. Writes
benchmarks/results/answers_under_load.{json,md}.
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
EVALSETS = {"default": "evalsets/default", "support": str(ROOT / "benchmarks" / "evalsets" / "support")}


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.answers_under_load", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m", help="a selector model config name")
    p.add_argument("--precisions", default="bf16,gptq-int4")
    p.add_argument("--engine", default="vllm", help="engine=... (vllm; scripted-* for a check without a model)")
    p.add_argument("--evalsets", default="default,support",
                   help=f"comma-separated: {', '.join(EVALSETS)}, or paths to eval set folders")
    p.add_argument("--concurrency", default="1,2,4,8", help="measure.load.concurrency")
    p.add_argument("--requests", type=int, default=None,
                   help="measure.load.requests_per_level (default: the eval set's generation items, each sent once)")
    p.add_argument("--new-tokens", type=int, default=None,
                   help="measure.load.new_tokens (default: the longest generation task's max_new_tokens)")
    p.add_argument("--limit", type=int, default=None, help="evalset.limit: items per task (default: all)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--enforce-eager", action="store_true", help="skip vLLM's compile (quick checks, not measurements)")
    p.add_argument("--max-load", type=float, default=None, help="wait until the 1-minute load is below this")
    p.add_argument("--wait-s", type=float, default=1800.0)
    p.add_argument("--stem", default="answers_under_load", help="results/<stem>.{json,md}")
    p.add_argument("--out-dir", type=Path, default=RESULTS_DIR, help="where the results go")
    p.add_argument("--keep", type=Path, default=None, help="keep the sweeps' output folders here")
    p.add_argument("overrides", nargs="*", help="more selector overrides, e.g. cache_dir=/data/cache")
    return p.parse_args(argv)


def evalset_path(name: str) -> str:
    return EVALSETS.get(name, name)


def load_plan(path: str, limit: int | None) -> dict[str, Any]:
    """The eval set's generation tasks: their items and answer lengths (what a level sends)."""
    from selector.tasks import load_evalset

    tasks = load_evalset(path, None, limit)
    generated = [t for t in tasks if t.type == "generate"]
    if not generated:
        raise SystemExit(f"{path}: no generation task, so no answer under load to score")
    return {"tasks": {t.name: {"items": len(t.items), "max_new_tokens": t.max_new_tokens, "metric": t.metric}
                      for t in generated},
            "multiple_choice": [t.name for t in tasks if t.type != "generate"],
            "items": sum(len(t.items) for t in generated),
            "longest": max(t.max_new_tokens for t in generated)}


def sweep_overrides(args: argparse.Namespace, path: str, plan: dict[str, Any]) -> list[str]:
    out = [f"model={args.model}", f"precision={args.precisions}", f"engine={args.engine}", "search=grid",
           "measure=load", "measure.latency.enabled=false", "measure.throughput.enabled=false",
           "measure.fidelity=false", f"evalset.path={path}", f"threads={args.threads}", "tracker=none",
           f"measure.load.concurrency=[{args.concurrency}]",
           f"measure.load.requests_per_level={args.requests or plan['items']}",
           f"measure.load.new_tokens={args.new_tokens or plan['longest']}",
           "measure.load.max_duration_s=3600"]
    if args.limit is not None:
        out.append(f"evalset.limit={args.limit}")
    if args.enforce_eager:
        out.append("engine.vllm.enforce_eager=true")
    return out + list(args.overrides)




def level_figures(level: dict[str, Any]) -> dict[str, Any]:
    a = level["answers"] or {}
    return {
        "concurrency": level.get("concurrency"), "requests": level["requests"], "errors": level["errors"],
        "request_throughput": level["request_throughput"],
        "e2e_p95_ms": (level.get("e2e_ms") or {}).get("p95"),
        "answers": None if not a else {
            "compared": a["compared"], "changed": a["changed"], "failed": a["failed"],
            "share": a["changed"] / a["compared"] if a["compared"] else None, "p_value": a["p_value"],
            "tasks": {task: {k: t.get(k) for k in ("requests", "compared", "changed", "items", "value", "ci_low",
                                                    "ci_high", "at_rest", "diff_low", "diff_high", "flips_to_wrong",
                                                    "flips_to_right", "test", "p_value", "note")}
                      for task, t in a["tasks"].items()},
            "examples": a["examples"], "note": a.get("note", "")},
    }


def summarize(sweep: Path) -> dict[str, Any]:
    report = json.loads((sweep / "report" / "report.json").read_text())
    variants = []
    for raw in report["records"]:
        serving = raw.get("serving") or {}
        variants.append({
            "variant": raw["variant"]["model"] + "/" + raw["variant"]["precision"], "status": raw["status"],
            "reason": raw.get("reason", ""), "served_as": serving.get("quantization") or "unquantized",
            "kernels": serving.get("kernels", []), "vllm": serving.get("version", ""),
            "at_rest": {task: {"value": t["value"], "n": t["n"]} for task, t in (raw.get("tasks") or {}).items()},
            "levels": [level_figures(lv) for lv in ((raw.get("perf") or {}).get("load") or [])]})
    selection = report["selection"]
    return {"variants": variants, "winner": selection["winner"], "summary": selection["summary"],
            "warnings": [w for w in selection["warnings"] if "under load" in w]}


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def pval(p: float | None) -> str:
    return "-" if p is None else ("<0.001" if p < 0.001 else f"{p:.3g}")


def markdown(data: dict[str, Any]) -> str:
    from selector.report.render import md_text

    a = data["args"]
    lines = [f"# Answers under load: {a['model']} ({a['precisions']}) on engine={a['engine']}", "",
             *machine_lines(data, f"{a['threads']} threads"),
             f"- {'vLLM eager (--enforce-eager: a check, not a measurement)' if a['enforce_eager'] else 'as deployed'}",
             "- each level compares every answer with the same variant's answer at rest (its evaluation, through "
             "the same server); accuracy over items; paired test per item: McNemar's exact test (0/1 scores) or "
             "Wilcoxon's signed-rank test; a level's p: the smallest of its tasks' after Holm's adjustment", ""]
    for run in data["runs"]:
        plan = run["plan"]
        tasks = ", ".join(f"{t} ({v['items']} items, {v['max_new_tokens']} tokens, {v['metric']})"
                          for t, v in plan["tasks"].items())
        lines += [f"## Eval set {run['evalset']}", "",
                  f"- generation tasks sent: {tasks}; not sent (multiple choice): "
                  f"{', '.join(plan['multiple_choice']) or 'none'}",
                  f"- command: `python -m selector {' '.join(run['overrides'])}`",
                  f"- sweep wall time: {run['wall_s']:.0f} s", "",
                  "| variant | level | req/s | answers changed | level p | per task: under load vs at rest |",
                  "|---|---|---|---|---|---|"]
        for v in run["variants"]:
            if not v["levels"]:
                lines.append(f"| {v['variant']} | ({v['status']}{': ' + v['reason'] if v['reason'] else ''}) | | | | |")
            for lv in v["levels"]:
                ans = lv["answers"]
                if ans is None:
                    lines.append(f"| {v['variant']} | c={lv['concurrency']} | {lv['request_throughput']:.3g} | "
                                 "not scored | | |")
                    continue
                per_task = "; ".join(
                    f"{t} {pct(x['value'])} vs {pct(x['at_rest'])} ({x['changed']} changed, p {pval(x['p_value'])})"
                    if x["value"] is not None else f"{t}: {x['note'] or 'not scored'}"
                    for t, x in ans["tasks"].items())
                lines.append(f"| {v['variant']} | c={lv['concurrency']} | {lv['request_throughput']:.3g} | "
                             f"{ans['changed']} of {ans['compared']} ({pct(ans['share'])}) | {pval(ans['p_value'])} | "
                             f"{md_text(per_task)} |")
        lines += ["", "At rest (the evaluation): " + "; ".join(
            f"{v['variant']}: " + ", ".join(f"{t} {pct(x['value'])} (n={x['n']})" for t, x in v["at_rest"].items())
            for v in run["variants"]), ""]
        examples = [(v["variant"], lv["concurrency"], e) for v in run["variants"] for lv in v["levels"]
                    if lv["answers"] for e in lv["answers"]["examples"]][:8]
        if examples:
            lines += ["Changed answers (the first few):", "",
                      "| variant | level | task | item | at rest | under load |", "|---|---|---|---|---|---|"]
            lines += [f"| {name} | c={c} | {e['task']} | {md_text(e['id'])} | {md_text(repr(e['at_rest'][:80]))} | "
                      f"{md_text(repr(e['under_load'][:80]))} |" for name, c, e in examples]
            lines.append("")
        lines += [f"Verdict: {md_text(run['summary'])}", ""]
        lines += [f"- {md_text(w)}" for w in run["warnings"]]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    machine = machine_when_quiet(args.threads, args.max_load, args.wait_s)
    before, neighbours = load_average(), NeighbourCpu()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.evalsets.split(","):
            path = evalset_path(name)
            plan = load_plan(path, args.limit)
            overrides = sweep_overrides(args, path, plan)
            say(f"eval set {name}: {plan['items']} generation items; python -m selector {' '.join(overrides)}")
            out = (args.keep or Path(tmp)) / Path(name).name
            wall, sweep, printed = run_sweep(overrides, out)
            runs.append({"evalset": name, "plan": plan, "overrides": overrides, "wall_s": wall,
                         "printed": printed[-3000:].replace(str(out), "<output>"), **summarize(sweep)})
    data = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}, "machine": machine,
            "load_before": before, "neighbours": neighbours.read(), "load_after": load_average(), "runs": runs}
    if args.keep:  # committed results name no local folder
        data["args"]["keep"] = "<output>"
    cache_dir = next((o.split("=", 1)[1] for o in args.overrides if o.startswith("cache_dir=")), None)
    json_path, md_path = write_results(args.stem, data, markdown(data), out_dir=args.out_dir, cache_dir=cache_dir)
    print(md_path.read_text())
    say(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
