"""selector's latency measurement vs optimum-benchmark's inference scenario on the same model, dtype,
batch sizes, prompt length and number of new tokens, in one run: prefill and decode latency and
memory from both, side by side.

    python -m benchmarks.vs_optimum_benchmark                      # SmolLM2-135M, bf16, batch 1 and 8, 3 runs
    python -m benchmarks.vs_optimum_benchmark --model qwen2.5-coder-1.5b --runs 1

optimum-benchmark runs from its own venv (benchmarks/.venv-optimum, $SELECTOR_OPTIMUM_BENCHMARK_VENV
or --optimum-venv) with its `inline` launcher; selector runs in a process of its own too
(benchmarks/selector_latency_worker.py). Each run measures optimum-benchmark, then selector; the
table shows the median over runs of each tool's median. Results:
benchmarks/results/vs_optimum_benchmark-<model>-<precision>.json/.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from benchmarks import tables
from benchmarks.common import (
    REPO_ROOT, BenchmarkError, NeighbourCpu, compose, load_average, machine_when_quiet, peer_python, peer_versions, run_worker,
    say, write_results,
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.vs_optimum_benchmark", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m", help="a selector model config name (selector/conf/model)")
    p.add_argument("--precision", default="bf16", choices=("bf16", "fp32"))
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    p.add_argument("--prompt-tokens", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--iterations", type=int, default=10, help="timed generate calls per batch size, each tool")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=2, help="torch threads, the same for both tools")
    p.add_argument("--runs", type=int, default=3, help="alternating runs of both tools; medians are reported")
    p.add_argument("--optimum-venv", type=Path)
    p.add_argument("--max-load", type=float, default=None,
                   help="wait (up to --wait-s) until the 1-minute load average is below this before measuring")
    p.add_argument("--wait-s", type=float, default=1800)
    p.add_argument("--timeout-s", type=float, default=3600)
    p.add_argument("--out", type=Path, default=None)
    return p.parse_args(argv)


def optimum_figures(point: dict[str, Any], new_tokens: int) -> dict[str, float | None]:
    """One batch size of optimum-benchmark's report, in the table's units (p50s, like selector's)."""
    batch = point["batch_size"]
    prefill, decode, generate = (point.get(k) or {} for k in ("prefill", "decode", "generate"))
    decode_s = decode.get("p50")
    memory = (point.get("memory") or {}).get("decode") or {}
    return {
        "prefill_ms": prefill.get("p50") * 1e3 if prefill.get("p50") is not None else None,
        "decode_ms": decode_s * 1e3 if decode_s is not None else None,
        # optimum-benchmark 0.6.0's own per_token figure keeps events across iterations (its list is
        # never reset), so gaps between generate calls leak in: derive it from decode instead.
        "per_token_ms": decode_s * 1e3 / (new_tokens - 1) if decode_s else None,
        "generate_ms": generate.get("p50") * 1e3 if generate.get("p50") is not None else None,
        "decode_tokens_per_s": batch * (new_tokens - 1) / decode_s if decode_s else None,
        "peak_rss_mb": memory.get("max_ram"),
    }


def selector_figures(point: dict[str, Any], new_tokens: int, peak_rss_bytes: int) -> dict[str, float | None]:
    batch = point["batch_size"]
    return {
        "prefill_ms": point["prefill_p50_s"] * 1e3,
        "decode_ms": point["decode_p50_s"] * 1e3,
        "per_token_ms": point["per_token_p50_s"] * 1e3,
        "generate_ms": point["generate_p50_s"] * 1e3,
        "decode_tokens_per_s": batch * (new_tokens - 1) / point["decode_p50_s"],
        "peak_rss_mb": peak_rss_bytes / 1e6,  # MB of 10^6 bytes, as optimum-benchmark reports
    }


def median_figures(runs: list[dict[int, dict[str, float | None]]]) -> dict[int, dict[str, float | None]]:
    out: dict[int, dict[str, float | None]] = {}
    for batch in runs[0]:
        out[batch] = {}
        for key in runs[0][batch]:
            values = [r[batch][key] for r in runs if r[batch].get(key) is not None]
            out[batch][key] = tables.median(values) if values else None
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    out_dir = args.out or (REPO_ROOT / "benchmarks" / "results")
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = compose(args.model, args.precision)
    from selector import models

    resolved = models.resolve(cfg.model, Path(cfg.cache_dir), precision=cfg.precision.name, dtype=cfg.precision.dtype,
                              progress=False)
    python = peer_python("optimum-benchmark", args.optimum_venv)
    stem = f"vs_optimum_benchmark-{cfg.model.name}-{args.precision}"
    ob_spec = {"model_path": resolved.path, "dtype": cfg.precision.dtype, "threads": args.threads,
               "batch_sizes": args.batch_sizes, "sequence_length": args.prompt_tokens, "new_tokens": args.new_tokens,
               "iterations": args.iterations, "warmup_runs": args.warmup}
    sel_spec = {"model": cfg.model.name, "precision": args.precision, "threads": args.threads,
                "batch_sizes": args.batch_sizes, "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens,
                "warmup": args.warmup, "repeats": args.iterations}
    info = machine_when_quiet(args.threads, args.max_load, args.wait_s)
    ob_runs, sel_runs = [], []
    neighbours = NeighbourCpu()
    for run in range(args.runs):
        say(f"run {run + 1}/{args.runs}: optimum-benchmark ...")
        ob_runs.append(run_worker(python, "optimum_worker.py", ob_spec, args.threads, args.timeout_s,
                                  log=out_dir / "logs" / f"{stem}.optimum.{run + 1}.log"))
        say("  selector ...")
        sel_runs.append(run_worker(Path(sys.executable), "selector_latency_worker.py", sel_spec, args.threads,
                                   args.timeout_s, log=out_dir / "logs" / f"{stem}.selector.{run + 1}.log"))
        say(f"  done (load average {load_average()})")
    info["load_average_end"] = load_average()
    info["neighbours_during_runs"] = neighbours.read()

    ob = median_figures([{p["batch_size"]: optimum_figures(p, args.new_tokens) for p in r["points"]} for r in ob_runs])
    sel = median_figures([{p["batch_size"]: selector_figures(p, args.new_tokens, r["peak_rss_bytes"])
                           for p in r["points"]} for r in sel_runs])
    rows = tables.latency_rows(sel, ob)
    same_def_rss = {"selector": tables.median([r["peak_rss_bytes"] / 1e6 for r in sel_runs]),
                    "optimum_benchmark": tables.median([r["peak_rss_bytes"] / 1e6 for r in ob_runs])}
    data = {
        "benchmark": "vs_optimum_benchmark", "machine": info,
        "peers": {"optimum-benchmark": peer_versions(python, ["optimum-benchmark", "torch", "transformers"])},
        "settings": {"model": cfg.model.name, "precision": args.precision, "dtype": cfg.precision.dtype,
                     "batch_sizes": args.batch_sizes, "prompt_tokens": args.prompt_tokens,
                     "new_tokens": args.new_tokens, "iterations": args.iterations, "warmup": args.warmup,
                     "threads": args.threads, "runs": args.runs, "launcher": "inline"},
        "rows": rows, "process_peak_rss_mb": same_def_rss,
        "weight_mb": sel_runs[0]["weight_bytes"] / 1e6,
        "selector_measure_latency_batch1": [r["measure_latency_batch1"] for r in sel_runs],
        "optimum_runs": ob_runs, "selector_runs": sel_runs, "notes": notes(cfg),
    }
    md = render_markdown(data)
    json_path, md_path = write_results(stem, data, md, out_dir)
    print(md)
    say(f"wrote {json_path} and {md_path}")
    return 0


def notes(cfg: Any) -> list[str]:
    out = [
        "prefill: from the start of generate() to the first decoding step's logits, the same definition in both "
        "(both stamp the clock in a logits processor). decode: from there to the end of generate(). per output "
        "token: selector's tpot (first to last decoding step / (new tokens - 1)); for optimum-benchmark decode / "
        "(new tokens - 1), because its own per-token list is not reset between iterations in 0.6.0",
        "inputs: optimum-benchmark feeds random token ids, selector a fixed English text cut to the same length; "
        "both force exactly the same number of new tokens (min_new_tokens = max_new_tokens), so the work is equal",
        "memory: 'peak process memory' is optimum-benchmark's max RSS sampled every 10 ms while it runs the decode "
        "measurement, and selector's peak RSS over its whole process (getrusage ru_maxrss, loading included), the "
        "figure selector records per variant; the same-definition comparison (ru_maxrss of each worker process) "
        "is given below the table",
        "optimum-benchmark ran with its inline launcher (its default process launcher busy-waits in the parent "
        "and, on 2 cores, tripled latencies) and the same torch thread count, set with torch.set_num_threads",
    ]
    if cfg.model.notes:
        out.append(f"{cfg.model.name}: {cfg.model.notes}")
    return out


def render_markdown(data: dict[str, Any]) -> str:
    s = data["settings"]
    rss = data["process_peak_rss_mb"]
    lines = [f"# selector vs optimum-benchmark: {s['model']} ({s['precision']}), prompt {s['prompt_tokens']} tokens, "
             f"{s['new_tokens']} new tokens\n",
             tables.machine_markdown(data["machine"], data["peers"]),
             f"\nMedian of {s['runs']} runs of each tool's p50 over {s['iterations']} generate calls "
             f"(after {s['warmup']} warm-up calls), batch sizes {', '.join(map(str, s['batch_sizes']))}.\n\n",
             tables.latency_markdown(data["rows"]),
             f"\nPeak RSS of each tool's whole worker process (same definition, getrusage): selector "
             f"{rss['selector']:.0f} MB, optimum-benchmark {rss['optimum_benchmark']:.0f} MB. Weights: "
             f"{data['weight_mb']:.0f} MB.\n",
             "\n## Notes\n"] + [f"- {n}\n" for n in data["notes"]]
    return "".join(lines)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchmarkError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
