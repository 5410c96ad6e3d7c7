"""How far fidelity through a server's top-k log-probabilities falls below the in-process figure.

A server (vLLM) returns at most 20 log-probabilities per position, so a served variant's KL against
the baseline is computed over fewer buckets (selector/measure/fidelity.py, `compare_top`): a lower
bound of the in-process figure, which is itself a lower bound of the full-vocabulary KL. This runs
each precision in-process, where the whole distribution is known, and computes all three from the
same next-token distributions: the full-vocabulary KL, the in-process (top-256 buckets) figure and
the server's (the variant's top-k, k = 5, 20), and the top-1 agreement both ways.

    python -m benchmarks.fidelity_topk [--model smollm2-135m] [--precisions int8,gptq-int4,...] [cache_dir=...]

Writes benchmarks/results/fidelity_topk-<model>.{json,md}.
"""

from __future__ import annotations

import argparse
from typing import Any

from benchmarks.common import machine, say, write_results

KS = (5, 20)


def figures(model: str, precisions: list[str], overrides: list[str]) -> dict[str, Any]:
    import torch

    from selector.compose import compose
    from selector.engines.inprocess import HfEngineConfig, InProcessRunning
    from selector.measure.fidelity import (
        PROBE_POSITIONS,
        compare,
        compare_top,
        probe_logprobs,
        probe_token_ids,
        reference_from,
    )
    from selector.precisions import load_variant
    from selector.tasks import load_evalset

    def load(precision: str) -> tuple[Any, Any]:
        cfg = compose([f"model={model}", f"precision={precision}", *overrides])
        loaded = load_variant(cfg.model, cfg.precision, cfg.cache_dir, "cpu", calibration=cfg.calibration,
                              progress=False)[1]
        return cfg, InProcessRunning(HfEngineConfig(), loaded)

    cfg, baseline = load("bf16")
    tasks = load_evalset(cfg.evalset.path, cfg.evalset.tasks, cfg.evalset.limit)
    probes = probe_token_ids(baseline, tasks, cfg)
    p_full = list(probe_logprobs(baseline.model, probes, PROBE_POSITIONS))
    ref = reference_from(p_full)
    baseline.stop()
    rows = []
    for name in precisions:
        say(f"fidelity of {model}/{name}: whole distribution, top-256 buckets, and a server's top-k")
        _, running = load(name)
        q_full = list(probe_logprobs(running.model, probes, PROBE_POSITIONS))
        running.stop()
        p, q = torch.cat(p_full), torch.cat(q_full)
        full = (p.exp() * (p - q)).sum(-1)
        inprocess, agree = compare(ref, q)
        row = {"precision": name, "positions": int(full.numel()), "kl_full_vocabulary": float(full.mean()),
               "kl_in_process": float(inprocess.mean()), "top1_in_process": float(agree.float().mean())}
        for k in KS:
            top = q.topk(k, dim=-1)
            kl, agree_k = compare_top(ref, top.indices, top.values)
            row[f"kl_top{k}"] = float(kl.mean())
            row[f"top1_top{k}"] = float(agree_k.float().mean())
            row[f"top{k}_of_full"] = float(kl.mean() / full.mean()) if float(full.mean()) > 0 else None
        rows.append(row)
    return {"model": model, "probes": len(probes), "rows": rows}


def markdown(result: dict[str, Any], env: dict[str, Any]) -> str:
    lines = [f"# Fidelity through a server's top-k: {result['model']}", "",
             f"{result['probes']} probes x {result['rows'][0]['positions'] // result['probes'] if result['rows'] else 0} "
             f"positions, against bf16. Mean KL(bf16 || variant) three ways from the same distributions, and "
             f"how much of the full-vocabulary figure a server's top-k keeps. Machine: {env.get('cpu', '')}.", "",
             "| precision | KL full vocabulary | KL in-process (top-256 buckets) | KL server top-20 | top-20 / full "
             "| KL server top-5 | top-1 in-process | top-1 top-20 |",
             "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['precision']} | {r['kl_full_vocabulary']:.4f} | {r['kl_in_process']:.4f} | "
                     f"{r['kl_top20']:.4f} | {r['top20_of_full']:.1%} | {r['kl_top5']:.4f} | "
                     f"{r['top1_in_process']:.3f} | {r['top1_top20']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--precisions", default="int8,gptq-int4,awq-int4,int8-w8a8")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("overrides", nargs="*", help="selector overrides, e.g. cache_dir=...")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    result = figures(args.model, args.precisions.split(","), args.overrides)
    env = machine(args.threads)
    write_results(f"fidelity_topk-{args.model}", {"machine": env, **result}, markdown(result, env))


if __name__ == "__main__":
    main()
