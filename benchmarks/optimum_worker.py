"""Runs inside optimum-benchmark's own venv (not selector's): its inference scenario on one model at
several batch sizes, with the inline launcher, and writes the report of each as JSON.

    <optimum venv>/bin/python benchmarks/optimum_worker.py spec.json out.json

spec: model_path, dtype, threads, batch_sizes, sequence_length, new_tokens, iterations, warmup_runs.
The inline launcher runs the benchmark in this process: optimum-benchmark's default `process`
launcher busy-waits in its parent, which on a 2-core machine took ~70% of a core from the process
it measured and tripled its latencies. Threads are set here with torch.set_num_threads (the
backend's own `inter_op_num_threads` sets intra-op threads, and the other way round, in 0.6.0).

optimum-benchmark 0.6.0 imports `transformers.SpecialTokensMixin`, which transformers 5 removed; it
only names it in a type annotation, so the worker defines a placeholder before the import. That
keeps both tools on the same transformers (5.17) and so the same model code.
Imports nothing from selector.
"""

from __future__ import annotations

import json
import logging
import resource
import sys
import time


def _latency(entry: dict | None) -> dict | None:
    if not entry or not entry.get("latency"):
        return None
    lat = entry["latency"]
    return {k: lat.get(k) for k in ("mean", "p50", "p90", "p95", "p99", "stdev", "unit")} | {
        "count": len(lat.get("values", []))}


def main(spec_path: str, out_path: str) -> None:
    spec = json.load(open(spec_path, encoding="utf-8"))
    import torch

    torch.set_num_threads(spec["threads"])
    logging.getLogger().setLevel(logging.WARNING)
    import transformers
    import transformers.image_processing_utils  # noqa: F401  (importing it later resets the lazy module's names)

    if not hasattr(transformers, "SpecialTokensMixin"):  # gone in transformers 5; a type annotation there
        transformers.SpecialTokensMixin = type("SpecialTokensMixin", (), {})
    from optimum_benchmark import Benchmark, BenchmarkConfig, InferenceConfig, InlineConfig, PyTorchConfig

    points = []
    for batch in spec["batch_sizes"]:
        config = BenchmarkConfig(
            name=f"selector-side-by-side-b{batch}",
            launcher=InlineConfig(),
            scenario=InferenceConfig(
                latency=True, memory=True, iterations=spec["iterations"], duration=0,
                warmup_runs=spec["warmup_runs"],
                input_shapes={"batch_size": batch, "sequence_length": spec["sequence_length"]},
                generate_kwargs={"max_new_tokens": spec["new_tokens"], "min_new_tokens": spec["new_tokens"]},
            ),
            backend=PyTorchConfig(model=spec["model_path"], device="cpu", torch_dtype=spec["dtype"], no_weights=False,
                                  task="text-generation", library="transformers"),
        )
        start = time.perf_counter()
        report = Benchmark.launch(config).to_dict()
        wall = time.perf_counter() - start
        memory = {k: (report.get(k) or {}).get("memory") for k in ("load_model", "prefill", "decode")}
        points.append({
            "batch_size": batch, "wall_s": wall, "torch_threads": torch.get_num_threads(),
            "prefill": _latency(report.get("prefill")), "decode": _latency(report.get("decode")),
            "generate": _latency(report.get("generate")), "per_token": _latency(report.get("per_token")),
            "decode_throughput": (report.get("decode") or {}).get("throughput"),
            "memory": memory,
        })
    answer = {"points": points, "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    json.dump(answer, open(out_path, "w", encoding="utf-8"), default=str)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
