"""GPTQ's quantize time at two checkouts of selector, run in turn (A B A B ...) on one machine from
one cache state, so a change of selector's can be told from the machine's (issue 34). Any other
calibrated precision (`--precision awq-int4`), and two settings of one checkout
(`--a . --b . --b-override precision.params.batch_size=1`), compare the same way.

Each run hard-links a fresh cache holding the model's GGUF and converted folders and no quantized
artifact, then runs `python -m selector model=M precision=gptq-int4` from that checkout on it (one
eval item, no fidelity, latency or throughput: only the preparation matters), so every run
quantizes. The figure is the artifact manifest's `quantize_s` (the whole build: load, calibrate,
quantize, pack, save); beside it the load average and the cores other processes kept busy during
the run. Ratios A/B are taken pair by pair, so a machine whose load drifts still compares fairly.

    python -m benchmarks.gptq_ab --a . --b ../selector-1a9f009 --cache ~/.cache/selector \\
        --model smollm2-135m --pairs 3

The cache must hold the model converted as each checkout expects it (an older checkout reads the
float32 folder `models/<name>-<sha12>`, a newer one `models/<name>-<sha12>-bfloat16`): run each
checkout once on it first. Results: benchmarks/results/gptq_ab-<model>.json and .md (`--name` to
choose another stem).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import NeighbourCpu, load_average, machine, say, write_results

OVERRIDES = ("evalset.limit=1", "measure.fidelity=false", "measure.latency.enabled=false",
             "measure.throughput.enabled=false", "tracker=none")


def fresh_cache(base: Path, model: str, into: Path) -> Path:
    """The model's GGUF and converted folders of `base`, hard-linked (nothing is copied or written
    through: quantizing only reads them), and nothing else: no quantized artifact, no reference."""
    for sub, pattern in (("gguf", f"{model}.*"), ("models", f"{model}-*")):
        for path in (base / sub).glob(pattern):
            target = into / sub / path.name
            if path.is_dir():
                shutil.copytree(path, target, copy_function=os.link)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                os.link(path, target)
    return into


def one_run(checkout: Path, base: Path, model: str, overrides: list[str], log: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gptq-ab-") as tmp:
        cache = fresh_cache(base, model, Path(tmp) / "cache")
        cmd = [sys.executable, "-m", "selector", f"model={model}", *OVERRIDES, *overrides, f"cache_dir={cache}",
               f"output_dir={Path(tmp) / 'out'}"]
        before, neighbours = load_average(), NeighbourCpu()
        done = subprocess.run(cmd, cwd=checkout, env={**os.environ, "PYTHONPATH": str(checkout)},
                              capture_output=True, text=True, timeout=6 * 3600)
        others = neighbours.read()
        log.write_text(done.stdout + "\n--- stderr ---\n" + done.stderr, encoding="utf-8")
        manifests = list((cache / "quantized").glob("*/selector-artifact.json"))
        if done.returncode != 0 or len(manifests) != 1:
            raise RuntimeError(f"{checkout}: exit {done.returncode}, {len(manifests)} artifacts; see {log}")
        manifest = json.loads(manifests[0].read_text())
    return {"quantize_s": manifest["quantize_s"], "calibration_sha256": manifest["calibration"]["sha256"],
            "tokens": manifest["calibration"].get("tokens"), "versions": manifest["key"].get("versions"),
            "load_average_before": before, "load_average_after": load_average(),
            "others_busy_cores": others["others_busy_cores"], "run_wall_s": others["wall_s"]}


def commit_of(checkout: Path) -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def markdown(data: dict[str, Any]) -> str:
    a, b = data["a"], data["b"]
    lines = [f"# {data['precision']} quantize time, {data['model']}: {a['commit']} {' '.join(a['overrides'])} (A) "
             f"against {b['commit']} {' '.join(b['overrides'])} (B), in turn", "",
             f"{data['machine']['cpu']}, {data['machine']['cores']} cores; runs in turn, A first; "
             "quantize_s from each artifact's manifest.", "",
             "| pair | A quantize_s | B quantize_s | A / B | load average (1 min) before A, B "
             "| others' busy cores A, B |",
             "|---|---|---|---|---|---|"]
    for i, (ra, rb) in enumerate(zip(a["runs"], b["runs"]), 1):
        ratio = ra["quantize_s"] / rb["quantize_s"]
        lines.append(f"| {i} | {ra['quantize_s']:.1f} | {rb['quantize_s']:.1f} | {ratio:.2f} "
                     f"| {ra['load_average_before'][0]}, {rb['load_average_before'][0]} "
                     f"| {ra['others_busy_cores']}, {rb['others_busy_cores']} |")
    lines += ["", f"Median A / B: **{data['median_ratio']:.2f}**. Same calibration in every run: "
              f"{data['same_calibration']}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gptq_ab", description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", type=Path, required=True, help="checkout A (e.g. this one: .)")
    parser.add_argument("--b", type=Path, required=True, help="checkout B (e.g. a worktree at an older commit)")
    parser.add_argument("--cache", type=Path, required=True,
                        help="a cache holding the model's GGUF and converted folders")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--precision", default="gptq-int4", help="a calibrated precision (gptq-int4, awq-int4 ...)")
    parser.add_argument("--a-override", action="append", default=[], help="an override for A's runs only")
    parser.add_argument("--b-override", action="append", default=[], help="an override for B's runs only")
    parser.add_argument("--name", default=None, help="results stem (default gptq_ab-<model>)")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="results folder (default benchmarks/results)")
    args = parser.parse_args(argv)
    a, b, base = args.a.resolve(), args.b.resolve(), args.cache.expanduser().resolve()
    logs = Path(tempfile.mkdtemp(prefix="gptq-ab-logs-"))
    runs: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
    overrides = {"a": [f"precision={args.precision}", *args.a_override],
                 "b": [f"precision={args.precision}", *args.b_override]}
    for pair in range(1, args.pairs + 1):
        for side, checkout in (("a", a), ("b", b)):
            say(f"pair {pair}, {side.upper()} ({checkout.name}) ... load average {load_average()}")
            runs[side].append(one_run(checkout, base, args.model, overrides[side], logs / f"{side}{pair}.log"))
            say(f"  quantize_s {runs[side][-1]['quantize_s']:.1f}")
    ratios = [ra["quantize_s"] / rb["quantize_s"] for ra, rb in zip(runs["a"], runs["b"])]
    # the runs leave torch at its default thread count: one per core
    data = {"model": args.model, "precision": args.precision, "machine": machine(threads=os.cpu_count() or 1),
            "overrides": list(OVERRIDES),
            "a": {"commit": commit_of(a), "overrides": args.a_override, "runs": runs["a"]},
            "b": {"commit": commit_of(b), "overrides": args.b_override, "runs": runs["b"]},
            "ratios": [round(r, 3) for r in ratios], "median_ratio": statistics.median(ratios),
            "same_calibration": len({r["calibration_sha256"] for r in runs["a"] + runs["b"]}) == 1}
    out = args.out or Path(__file__).resolve().parent / "results"
    _, md_path = write_results(args.name or f"gptq_ab-{args.model}", data, markdown(data), out, cache_dir=str(base))
    say(f"median A / B {data['median_ratio']:.2f}; {md_path}; logs in {logs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
