"""The README's table of a full grid: every variant's accuracy per task, its fidelity to the same
model at its baseline precision, its weights and how long quantizing took, read off a finished
sweep's report, with the sweep's wall time and waves.

    python -m benchmarks.first_run --runs cold --keep DIR --stem default_grid_run search=grid  # the grid, cold
    python -m benchmarks.grid_table DIR/cold --first-run-json benchmarks/results/default_grid_run.json

Writes benchmarks/results/default_grid.{json,md} (`--stem` for another name).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS_DIR, say, write_results
from selector.records import Variant


def newest_sweep(output_dir: Path) -> Path:
    sweeps = sorted((output_dir / "sweeps").glob("*/report/report.json"), key=lambda p: p.stat().st_mtime)
    if not sweeps:
        raise SystemExit(f"{output_dir}: no finished sweep (no sweeps/*/report/report.json)")
    return sweeps[-1].parent.parent


def name(record: dict[str, Any]) -> str:
    return Variant.model_validate(record["variant"]).name


def flipped_share(record: dict[str, Any], baseline: dict[str, Any]) -> float | None:
    """Share of the items both scored whose correctness changed against the baseline, either way."""
    pairs = [(score, baseline["tasks"][task]["item_scores"][item])
             for task, result in record["tasks"].items() if task in baseline["tasks"]
             for item, score in result["item_scores"].items() if item in baseline["tasks"][task]["item_scores"]]
    return sum(a != b for a, b in pairs) / len(pairs) if pairs else None


def row(record: dict[str, Any], by_name: dict[str, dict[str, Any]], tasks: list[str]) -> dict[str, Any]:
    fidelity, quant, memory = record.get("fidelity"), record.get("quant"), record.get("memory") or {}
    baseline = by_name.get(fidelity["baseline"]) if fidelity else None
    if quant is None:
        quantize = ""
    elif quant.get("quantize_s") is None:
        quantize = "at load"  # bitsandbytes quantizes the float weights as it loads them
    else:
        quantize = f"{quant['quantize_s']:.0f} s"
    return {
        "variant": name(record),
        "status": record["status"],
        "accuracy_pct": {t: round(100 * record["tasks"][t]["value"], 1) for t in tasks if t in record["tasks"]},
        "n": {t: record["tasks"][t]["n"] for t in tasks if t in record["tasks"]},
        "kl": fidelity["mean_kl"] if fidelity else None,
        "top1": fidelity["top1_agreement"] if fidelity else None,
        "flipped": flipped_share(record, baseline) if baseline else None,
        "weights_gb": memory["weight_bytes"] / 1e9 if memory.get("weight_bytes") else None,
        # transformers unpacks compressed-tensors int4 to bf16 to run it in-process
        "unpacked": bool(quant and quant.get("library") == "llmcompressor" and "awq" in quant.get("method", "")),
        "quantize": quantize,
        "quantize_s": quant.get("quantize_s") if quant else None,
        "peaks_gib": {phase: round(memory[phase]["rss_bytes"] / 2**30, 2)
                      for phase in ("prepare", "load", "serving") if (memory.get(phase) or {}).get("rss_bytes")},
    }


# The README's order: each model's baseline first, then by how the precision is made.
PRECISION_ORDER = ("fp32", "bf16", "fp16", "int8", "int8-torchao", "nf4", "int8-w8a8", "awq-int4", "gptq-int4")


def _order(record: dict[str, Any]) -> tuple[int, int, str]:
    precision = record["variant"]["precision"]
    rank = PRECISION_ORDER.index(precision) if precision in PRECISION_ORDER else len(PRECISION_ORDER)
    return record["variant"].get("params", 0), rank, name(record)


def read_grid(sweep: Path, tasks: list[str] | None = None) -> dict[str, Any]:
    report = json.loads((sweep / "report" / "report.json").read_text())
    state = json.loads((sweep / "sweep.json").read_text())
    records = sorted(report["records"], key=_order)
    by_name = {name(r): r for r in records}
    tasks = tasks or list(dict.fromkeys(t for r in records for t in r["tasks"]))
    rows = [row(r, by_name, tasks) for r in records]
    return {"winner": report["selection"]["winner"], "tasks": tasks, "rows": rows,
            "largest_gain_over_baseline": largest_gain(records, by_name),
            "waves": (state.get("search") or {}).get("waves", [])}


def largest_gain(records: list[dict[str, Any]], by_name: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The most any quantized copy scored above its own baseline on one task, in points
    (search.sibling_margin's default rests on it: docs/search.md)."""
    gains = [(100 * (result["value"] - base["tasks"][task]["value"]), name(r), task)
             for r in records if r.get("fidelity") and (base := by_name.get(r["fidelity"]["baseline"]))
             for task, result in r["tasks"].items() if task in base["tasks"]]
    if not gains:
        return None
    points, variant, task = max(gains)
    return {"points": round(points, 1), "variant": variant, "task": task}


def _cell(value: float | None, fmt: str) -> str:
    return "" if value is None else format(value, fmt)


def markdown(data: dict[str, Any]) -> str:
    tasks = data["tasks"]
    lines = [f"# The default sweep's full grid ({data['command']})", "",
             f"- machine: {data['machine']}", f"- wall: {data['wall_s'] / 60:.1f} min ({data['cache']})",
             f"- quantizing: {data['quantize_total_s'] / 60:.1f} min of it", f"- winner: {data['winner']}",
             f"- the largest gain of a quantized copy over its own baseline on one task: {data['largest_gain_over_baseline']}",
             "",
             "Accuracy per task (%), fidelity against the same model at bf16, weight memory, quantization time "
             "and each phase's peak resident memory (GiB: prepare / load / serving):", "",
             "| variant | " + " | ".join(tasks) + " | KL | top-1 | flipped | weights GB | quantize | peaks GiB |",
             "|---|" + "---|" * (len(tasks) + 6)]
    for r in data["rows"]:
        label = f"**{r['variant']}**" if r["variant"] == data["winner"] else r["variant"]
        accuracy = " | ".join(_cell(r["accuracy_pct"].get(t), ".1f") for t in tasks)
        weights = _cell(r["weights_gb"], ".2f") + ("*" if r["unpacked"] else "")
        flipped = "" if r["flipped"] is None else f"{100 * r['flipped']:.1f}%"
        peaks = " / ".join(f"{r['peaks_gib'][p]:.1f}" if p in r["peaks_gib"] else "-" for p in ("prepare", "load", "serving"))
        if r["status"] != "completed":
            label += f" ({r['status']})"
            peaks = peaks if r["peaks_gib"] else ""
        lines.append(f"| {label} | {accuracy} | {_cell(r['kl'], '.3f')} | {_cell(r['top1'], '.3f')} | {flipped} | "
                     f"{weights} | {r['quantize']} | {peaks} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.grid_table", description=__doc__.split("\n\n")[0])
    p.add_argument("output_dir", type=Path, help="the grid's output folder (one `first_run` run's folder)")
    p.add_argument("--first-run-json", type=Path, default=None,
                   help="the first_run.json that timed it (wall time, machine); default: none")
    p.add_argument("--tasks", default=None, help="the tasks' columns, in order (default: as the records list them)")
    p.add_argument("--stem", default="default_grid")
    p.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    args = p.parse_args(argv)
    data = read_grid(newest_sweep(args.output_dir), args.tasks.split(",") if args.tasks else None)
    timed = json.loads(args.first_run_json.read_text()) if args.first_run_json else None
    run = timed["runs"][0] if timed else {}
    machine = timed["machine"] if timed else {}
    data.update({
        "command": timed["command"] if timed else "python -m selector search=grid",
        "machine": f"{machine.get('cpu', '?')}, {machine.get('cores', '?')} cores, quiet check {machine.get('quiet_check')}",
        "wall_s": run.get("wall_s", 0.0), "cache": f"{run.get('label', '?')} cache",
        "quantize_total_s": sum(r["quantize_s"] or 0 for r in data["rows"]),
    })
    json_path, md_path = write_results(args.stem, data, markdown(data), args.out_dir)
    say(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
