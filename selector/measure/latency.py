"""Single-request latency and batched throughput of an in-process model.

With the engine's fast path (`fast`, engines/fast.py: static cache + compiled decode step), every
shape that is timed is compiled first, outside the timed runs; the time that took is the fast
path's `compile_s`, reported apart.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from selector.config import LatencyConfig, ThroughputConfig
from selector.measure.percentiles import summarize
from selector.measure.timing import synthetic_prompt, timed_generate
from selector.records import LatencyResult, ThroughputPoint


def measure_latency(model: Any, tokenizer: Any, cfg: LatencyConfig, tick: Callable[[], None] | None = None,
                    fast: Any = None) -> LatencyResult:
    device = next(model.parameters()).device
    ids = torch.tensor([synthetic_prompt(tokenizer, cfg.prompt_tokens)], device=device)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    if fast is not None:
        fast.warm(ids, cfg.new_tokens, pad)  # compile outside the timed runs
    ttft, tpot, e2e = [], [], []
    for run in range(cfg.warmup + cfg.repeats):
        t0, stamps = timed_generate(model, ids, cfg.new_tokens, pad, fast)
        if tick:
            tick()
        if run < cfg.warmup:  # warm-up: allocator, kernels and caches settle
            continue
        steps = stamps[:-1]  # the last stamp is the end of generate()
        ttft.append((steps[0] - t0) * 1e3)
        if len(steps) > 1:
            tpot.append((steps[-1] - steps[0]) * 1e3 / (len(steps) - 1))
        e2e.append((stamps[-1] - t0) * 1e3)
    return LatencyResult(
        ttft_ms=summarize(ttft),
        tpot_ms=summarize(tpot or [0.0]),
        e2e_ms=summarize(e2e),
        prompt_tokens=cfg.prompt_tokens,
        output_tokens=cfg.new_tokens,
        repeats=cfg.repeats,
    )


def measure_throughput(model: Any, tokenizer: Any, cfg: ThroughputConfig, tick: Callable[[], None] | None = None,
                       fast: Any = None, latency: LatencyResult | None = None) -> list[ThroughputPoint]:
    """Output tokens per second at each batch size. Batch 1 with the latency runs' own prompt and
    length is what those runs already timed: it is read off them instead of generated again."""
    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    points = []
    for bs in cfg.batch_sizes:
        if bs == 1 and latency is not None and (latency.prompt_tokens, latency.output_tokens) == (
                cfg.prompt_tokens, cfg.new_tokens):
            wall = latency.e2e_ms.p50 / 1e3
            points.append(ThroughputPoint(batch_size=1, output_tokens_per_s=cfg.new_tokens / wall,
                                          requests_per_s=1 / wall, wall_s=wall))
            continue
        ids = torch.tensor([synthetic_prompt(tokenizer, cfg.prompt_tokens, variant=7 * r) for r in range(bs)], device=device)
        if fast is not None:
            fast.warm(ids, cfg.new_tokens, pad)  # compile outside the timed runs
        timed_generate(model, ids, min(4, cfg.new_tokens), pad, fast)  # warm-up at this shape
        walls = []
        for _ in range(cfg.repeats):
            t0, stamps = timed_generate(model, ids, cfg.new_tokens, pad, fast)
            walls.append(stamps[-1] - t0)
            if tick:
                tick()
        wall = sorted(walls)[len(walls) // 2]  # median: robust to a noisy neighbour
        points.append(
            ThroughputPoint(
                batch_size=bs,
                output_tokens_per_s=bs * cfg.new_tokens / wall,
                requests_per_s=bs / wall,
                wall_s=wall,
            )
        )
    return points
