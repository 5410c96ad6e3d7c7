"""In-process latency and throughput measured the old way (the raw model's generate, timed beside the
engine) and the new way (the in-process engine's own `send`, through its batcher), on one machine,
alternating A B A B, as ratios: how far moving every timed figure onto the engine interface moved
the in-process figures.

    python -m benchmarks.latency_engine_ab --before /path/to/checkout-before [--pairs 3] [cache_dir=...]

The checkout given with --before is a selector checkout of the commit before the engine interface
(its measure_latency(model, tokenizer, cfg) signature); this checkout is the after. Each side runs in
a process of its own (PYTHONPATH = its checkout) that loads the variant from the same cache and
prints its figures. Writes benchmarks/results/latency_engine_ab-<model>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.common import REPO_ROOT, machine, say, write_results

WORKER = r'''
import json, sys, torch
torch.set_num_threads(int(sys.argv[1]))
from selector.compose import compose
from selector.config import LatencyConfig, ThroughputConfig
from selector.precisions import load_variant
from selector.measure.latency import measure_latency, measure_throughput
cfg = compose([f"model={sys.argv[2]}", f"precision={sys.argv[3]}", *sys.argv[4:]])
_, loaded = load_variant(cfg.model, cfg.precision, cfg.cache_dir, "cpu", calibration=cfg.calibration, progress=False)
lat_cfg, tput_cfg = LatencyConfig(), ThroughputConfig(batch_sizes=[8])
try:  # after: through the in-process engine
    from selector.engines.inprocess.engine import HfEngineConfig, InProcessRunning
    running = InProcessRunning(HfEngineConfig(), loaded)
    lat = measure_latency(running, lat_cfg)
    tput = measure_throughput(running, tput_cfg)
except ImportError:  # before: the raw model beside the engine
    lat = measure_latency(loaded.model, loaded.tokenizer, lat_cfg)
    tput = measure_throughput(loaded.model, loaded.tokenizer, tput_cfg)
print("RESULT " + json.dumps({"ttft_p50": lat.ttft_ms.p50, "tpot_p50": lat.tpot_ms.p50, "e2e_p50": lat.e2e_ms.p50,
                               "e2e_p95": lat.e2e_ms.p95, "tok_s_b8": tput[0].output_tokens_per_s}))
'''
FIGURES = (("ttft_p50", "TTFT p50 ms"), ("tpot_p50", "per-token p50 ms"), ("e2e_p50", "e2e p50 ms"),
           ("e2e_p95", "e2e p95 ms"), ("tok_s_b8", "tokens/s at batch 8"))


def run(side: Path, model: str, precision: str, threads: int, overrides: list[str]) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(side)}
    done = subprocess.run([sys.executable, "-c", WORKER, str(threads), model, precision, *overrides],
                          capture_output=True, text=True, env=env, cwd=side, timeout=3600)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"{side}: no result\n{done.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, type=Path)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--precisions", default="bf16,gptq-int4")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)
    env = machine(args.threads)
    rows = {}
    for precision in args.precisions.split(","):
        runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
        for pair in range(args.pairs):
            for side in (("before", "after") if pair % 2 == 0 else ("after", "before")):
                say(f"{precision}, pair {pair + 1}: {side}")
                runs[side].append(run(args.before if side == "before" else REPO_ROOT, args.model, precision,
                                      args.threads, args.overrides))
        rows[precision] = runs
    lines = [f"# In-process latency before and after the engine interface: {args.model}", "",
             f"Medians over {args.pairs} runs of each side, alternating; {env['cpu']}, {args.threads} torch threads, "
             f"load average at start {env['load_average_start']}. Default measure config (64-token prompt, 32 new "
             "tokens, 2 warm-up + 10 timed runs; throughput at batch 8, 2 runs).", "",
             "| precision | figure | before | after | after / before |", "|---|---|---|---|---|"]
    for precision, runs in rows.items():
        for key, label in FIGURES:
            a = statistics.median(r[key] for r in runs["before"])
            b = statistics.median(r[key] for r in runs["after"])
            lines.append(f"| {precision} | {label} | {a:.1f} | {b:.1f} | {b / a:.3f} |")
    write_results(f"latency_engine_ab-{args.model}", {"machine": env, "runs": rows}, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
