"""How far fidelity through a server's top-k log-probabilities falls below the in-process figure.

A server (vLLM) returns at most 20 log-probabilities per position, so a served variant's KL against
the baseline is the least KL those allow (selector/measure/fidelity.py, `compare_top`): a lower bound
of the in-process figure, which is itself a lower bound of the full-vocabulary KL. This runs each
precision in-process, where the whole distribution is known, and computes all three from the same
next-token distributions: the full-vocabulary KL, the in-process (top-256 buckets) figure and the
server's (the variant's top-k, k = 5, 20), and the top-1 agreement both ways.

    python -m benchmarks.fidelity_topk [--model smollm2-135m] [--precisions int8,gptq-int4,...] [cache_dir=...]

Writes benchmarks/results/fidelity_topk-<model>.{json,md}.

    python -m benchmarks.fidelity_topk --synthetic

needs no model (seconds): synthetic baseline distributions (Gaussian logits, about 2.2 nats of
entropy, 0.5% of the mass outside the top 256, like a small LM's) and variants moved away from them
step by step, three ways: "shift" ranks the tokens as the baseline does, s places lower (from s = 20
on, the variant's top 20 share no token with the baseline's top 256); "mix" moves the logits towards
another model's; "demote" lowers the baseline's top n tokens by 12 logits (there the served figure's
order can differ from the full KL's: docs/precisions.md). Per step: the full-vocabulary KL, the
in-process figure, the served top-20 figure, the served figure as it was before (the baseline's
unnamed top tokens merged into one rest bucket, which read 0 when the two shared no token), and the
share of positions sharing none. Writes benchmarks/results/fidelity_topk-synthetic.{json,md};
tests/unit/test_fidelity.py asserts on the same sweeps.
"""

from __future__ import annotations

import argparse
from typing import Any

from benchmarks.common import machine, say, write_results

KS = (5, 20)


def figures(model: str, precisions: list[str], overrides: list[str]) -> dict[str, Any]:
    import torch

    from selector.compose import compose
    from selector.engines.inprocess.engine import HfEngineConfig, InProcessRunning
    from selector.engines.inprocess.logprobs import probe_logprobs
    from selector.measure.fidelity import (
        PROBE_POSITIONS,
        compare_full,
        compare_top,
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
        inprocess, agree = compare_full(ref, q)
        row = {"precision": name, "positions": int(full.numel()), "kl_full_vocabulary": float(full.mean()),
               "kl_in_process": float(inprocess.mean()), "top1_in_process": float(agree.float().mean())}
        for k in KS:
            top = q.topk(k, dim=-1)
            kl, agree_k = compare_top(ref, top.indices, top.values)
            row[f"kl_top{k}"] = float(kl.mean())
            row[f"kl_top{k}_merged"] = float(merged_top(ref, top.indices, top.values).mean())  # before issue 50
            row[f"top1_top{k}"] = float(agree_k.float().mean())
            row[f"top{k}_of_full"] = float(kl.mean() / full.mean()) if float(full.mean()) > 0 else None
        rows.append(row)
    return {"model": model, "probes": len(probes), "rows": rows}


# ---- synthetic sweeps (no model) -----------------------------------------------------------------
SHIFTS = (0, 1, 2, 3, 5, 10, 15, 20, 50, 256, 1000)
MIXES = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
DEMOTIONS = (0, 1, 5, 20, 100, 256, 512)


def synthetic_logits(positions: int = 64, vocab: int = 8192, scale: float = 5.0, seed: int = 0) -> tuple[Any, Any]:
    """A baseline's logits and another model's, float64 [positions, vocab]."""
    import torch

    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(positions, vocab, generator=g, dtype=torch.float64) * scale for _ in range(2))


def shifted(base: Any, s: int) -> Any:
    """The baseline's ranking moved s places down: the token at its rank r gets the logit of rank r + s
    (its last s ranks get the top logits)."""
    import torch

    order = base.argsort(-1, descending=True)
    return torch.empty_like(base).scatter_(-1, order, torch.roll(base.gather(-1, order), -s, dims=-1))


def mixed(base: Any, other: Any, a: float) -> Any:
    return (1 - a) * base + a * other


def demoted(base: Any, n: int, by: float = 12.0) -> Any:
    """The baseline's n most likely tokens `by` logits lower, the rest as they were."""
    order = base.argsort(-1, descending=True)[:, :n]
    return base.scatter(-1, order, base.gather(-1, order) - by)


def merged_top(ref: Any, ids: Any, logq: Any) -> Any:
    """The served figure before issue 50: the baseline's top tokens the server named are buckets, all
    else one rest bucket on each side (the variant's: one minus what its buckets hold). 0 when the
    server names none of them, however far the variant moved."""
    import torch

    from selector.measure.fidelity import REST_FLOOR

    match = ref.ids.unsqueeze(-1) == ids.unsqueeze(-2)
    known = match.any(-1)
    lq = torch.where(match, logq.unsqueeze(-2).double(), torch.tensor(float("-inf"), dtype=torch.float64)).amax(-1)
    lp = ref.logp.double()
    p_rest = torch.logaddexp(torch.where(known, torch.tensor(float("-inf"), dtype=torch.float64), lp).logsumexp(-1),
                             ref.rest.double())
    q_rest = (1 - torch.where(known, lq.exp(), torch.zeros_like(lq)).sum(-1)).clamp_min(REST_FLOOR).log()
    kl = torch.where(known, lp.exp() * (lp - lq), torch.zeros_like(lp)).sum(-1) + p_rest.exp() * (p_rest - q_rest)
    return kl.clamp_min(0.0)


def sweep_rows(base: Any, other: Any, k: int = 20) -> list[dict[str, Any]]:
    """Per sweep step: mean full-vocabulary KL, in-process and served figures, the old served figure."""
    import torch

    from selector.measure.fidelity import TOP_K, Reference, compare_full, compare_top, shares_none

    p = torch.log_softmax(base, -1)
    top = p.float().topk(TOP_K, dim=-1)
    ref = Reference(top.indices, top.values, p.float().scatter(-1, top.indices, float("-inf")).logsumexp(-1))
    steps = ([("shift", s, shifted(base, s)) for s in SHIFTS] + [("mix", a, mixed(base, other, a)) for a in MIXES]
             + [("demote", n, demoted(base, n)) for n in DEMOTIONS])
    rows = []
    for name, step, logits in steps:
        q = torch.log_softmax(logits, -1)
        full = (p.exp() * (p - q)).sum(-1)
        named = q.float().topk(k, dim=-1)
        ids, logq = named.indices, named.values
        served, _ = compare_top(ref, ids, logq, k)
        rows.append({"sweep": name, "step": step, "kl_full_vocabulary": float(full.mean()),
                     "kl_in_process": float(compare_full(ref, q.float())[0].mean()),
                     f"kl_top{k}": float(served.mean()), f"kl_top{k}_merged": float(merged_top(ref, ids, logq).mean()),
                     "disjoint": float(shares_none(ref, ids).float().mean()),
                     "served_le_full": bool((served.double() <= full + 1e-4).all())})
    return rows


def synthetic_markdown(rows: list[dict[str, Any]], setup: dict[str, Any]) -> str:
    lines = ["# Fidelity through a server's top-20 over synthetic sweeps", "",
             f"{setup['positions']} positions x {setup['vocab']} tokens, Gaussian logits x {setup['scale']} (seed "
             f"{setup['seed']}), baseline top-{setup['top_k']}. Shift s: the variant ranks tokens as the baseline "
             "does, s places lower (s >= 20: its top 20 share no token with the baseline's top 256); mix a: logits "
             "(1 - a) baseline + a other; demote n: the baseline's top n tokens 12 logits lower. "
             "Mean KL(baseline || variant).", "",
             "| sweep | step | KL full vocabulary | in-process (top-256 buckets) | served top-20 | served top-20, "
             "before (merged rest) | positions sharing no token |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['sweep']} | {r['step']} | {r['kl_full_vocabulary']:.3f} | {r['kl_in_process']:.3f} | "
                     f"{r['kl_top20']:.3f} | {r['kl_top20_merged']:.3f} | {r['disjoint']:.0%} |")
    return "\n".join(lines) + "\n"


def markdown(result: dict[str, Any], env: dict[str, Any]) -> str:
    lines = [f"# Fidelity through a server's top-k: {result['model']}", "",
             f"{result['probes']} probes x {result['rows'][0]['positions'] // result['probes'] if result['rows'] else 0} "
             f"positions, against bf16. Mean KL(bf16 || variant) three ways from the same distributions, and "
             f"how much of the full-vocabulary figure a server's top-k keeps. Machine: {env.get('cpu', '')}.", "",
             "| precision | KL full vocabulary | KL in-process (top-256 buckets) | KL server top-20 | top-20 / full "
             "| KL server top-20, before (merged rest) | KL server top-5 | top-1 in-process | top-1 top-20 |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['precision']} | {r['kl_full_vocabulary']:.4f} | {r['kl_in_process']:.4f} | "
                     f"{r['kl_top20']:.4f} | {r['top20_of_full']:.1%} | {r['kl_top20_merged']:.4f} | "
                     f"{r['kl_top5']:.4f} | {r['top1_in_process']:.3f} | {r['top1_top20']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--precisions", default="int8,gptq-int4,awq-int4,int8-w8a8")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--synthetic", action="store_true", help="the shift and mix sweeps, no model (seconds)")
    parser.add_argument("overrides", nargs="*", help="selector overrides, e.g. cache_dir=...")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    if args.synthetic:
        from selector.measure.fidelity import TOP_K

        setup = {"positions": 64, "vocab": 8192, "scale": 5.0, "seed": 0, "top_k": TOP_K}
        rows = sweep_rows(*synthetic_logits(setup["positions"], setup["vocab"], setup["scale"], setup["seed"]))
        env = machine(args.threads)
        write_results("fidelity_topk-synthetic", {"machine": env, "setup": setup, "rows": rows},
                      synthetic_markdown(rows, setup))
        return
    result = figures(args.model, args.precisions.split(","), args.overrides)
    env = machine(args.threads)
    write_results(f"fidelity_topk-{args.model}", {"machine": env, **result}, markdown(result, env))


if __name__ == "__main__":
    main()
