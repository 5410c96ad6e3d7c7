"""Latency at concurrency 1 and throughput at fixed batch sizes, through the running engine's own
`send` (engines/spec.py), so every engine is timed the same way: a served variant by the server it
runs in, an in-process one by its dynamic batcher (a batch of one for latency, the batch size at
once for throughput).

The prompt is `prompt_tokens` tokens of ordinary English, sent as token ids where the engine takes
them (in-process, vLLM), and every request generates exactly `new_tokens` tokens (end-of-sequence
ignored): every run does the same work. Warm-up runs come first and are not counted; a compiled
fast path is compiled for each shape before anything is timed (its time is reported apart).
Latency repeats the request until its mean end-to-end time is known to `precision` (at least
`min_repeats`, at most `repeats` times): on a 1.5B model on 2 cores each repeat is seconds, and the
same request in-process varies by about a percent. Each run sends its prompts with fresh
prefix-cache salts (selector.measure.requests.salted): a server never finds a repeat's prompt in
its prefix cache, so every repeat is timed with its whole prefill.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from selector.config import LatencyConfig, ThroughputConfig
from selector.generation import GenerationRequest
from selector.engines.spec import Batching, Running
from selector.measure.load_driver import Channel, drive_level, level_duration
from selector.measure.percentiles import summarize
from selector.measure.timing import FILLER, synthetic_prompt
from selector.records import LatencyResult, ThroughputPoint

MAX_RUN_S = 1800.0  # one latency or throughput run; a server that stops answering fails the stage


def fixed_requests(running: Running, prompt_tokens: int, new_tokens: int, n: int) -> list[GenerationRequest]:
    """n prompts of exactly prompt_tokens tokens (rotated so rows differ), each generating exactly
    new_tokens; as text of about that length where the engine has no tokenizer here."""
    out = []
    for row in range(n):
        if running.tokenizer is not None:
            ids = synthetic_prompt(running.tokenizer, prompt_tokens, variant=7 * row)
            text = running.tokenizer.decode(ids)
            out.append(GenerationRequest(text, new_tokens, token_ids=ids if running.token_ids else None,
                                         ignore_eos=True))
        else:
            words = (FILLER * (2 + prompt_tokens // 20)).split()
            out.append(GenerationRequest(" ".join(words[row:row + prompt_tokens * 3 // 4]), new_tokens, ignore_eos=True))
    return out


async def _timed(channel: Channel, requests: list[GenerationRequest], concurrency: int) -> list[Any]:
    from selector.measure.requests import salted

    traces = await drive_level(channel.send, salted(requests, "timed"), concurrency=concurrency,
                               max_duration_s=MAX_RUN_S)
    failed = [t for t in traces if not t.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(traces)} timed requests failed; the first: {failed[0].error}")
    return traces


def measure_latency(running: Running, cfg: LatencyConfig) -> LatencyResult:
    """One request at a time: time to first token, the mean gap between its tokens, end to end."""
    from selector.measure.traffic import on_engine

    (request,) = fixed_requests(running, cfg.prompt_tokens, cfg.new_tokens, 1)
    if request.token_ids is not None:
        running.warm([request.token_ids], cfg.new_tokens)

    async def body(channel: Channel) -> list[Any]:
        await _timed(channel, [request] * cfg.warmup, 1)  # allocator, kernels and caches settle
        traces: list[Any] = []
        while len(traces) < cfg.repeats and not precise_enough([t.e2e_ms for t in traces], cfg):
            traces += await _timed(channel, [request], 1)
        return traces

    traces = on_engine(running, Batching(1, 0.0), body)
    tpot = [t.itl_mean_ms for t in traces if t.itl_mean_ms is not None]
    return LatencyResult(
        ttft_ms=summarize([t.ttft_ms for t in traces if t.ttft_ms is not None] or [0.0]),
        tpot_ms=summarize(tpot or [0.0]),
        e2e_ms=summarize([t.e2e_ms for t in traces]),
        prompt_tokens=cfg.prompt_tokens,
        output_tokens=cfg.new_tokens,
        repeats=len(traces),
    )


def precise_enough(e2e_ms: list[float], cfg: LatencyConfig) -> bool:
    """Whether the repeats so far pin the mean end-to-end latency down to `cfg.precision`: the
    Student-t 95% interval of the mean within +-precision of it, after at least `min_repeats`. The
    same request again and again varies by a percent or two in-process, so the default stops at
    `min_repeats` there, and a noisy server or machine gets up to `repeats`."""
    n = len(e2e_ms)
    if cfg.precision is None or n < max(2, min(cfg.min_repeats, cfg.repeats)):
        return False
    from scipy.stats import t

    half_width = t.ppf(0.975, n - 1) * statistics.stdev(e2e_ms) / math.sqrt(n)
    return half_width <= cfg.precision * statistics.fmean(e2e_ms)


def measure_throughput(running: Running, cfg: ThroughputConfig, latency: LatencyResult | None = None) -> list[ThroughputPoint]:
    """Output tokens per second with `batch` requests sent at once, at each batch size (the median
    of `repeats` runs after one warm-up run). Batch 1 with the latency runs' own prompt and length
    is what those runs already timed: it is read off them instead of sent again."""
    from selector.measure.traffic import on_engine

    points = []
    for batch in cfg.batch_sizes:
        if batch == 1 and latency is not None and (latency.prompt_tokens, latency.output_tokens) == (
                cfg.prompt_tokens, cfg.new_tokens):
            wall = latency.e2e_ms.p50 / 1e3
            points.append(ThroughputPoint(batch_size=1, output_tokens_per_s=cfg.new_tokens / wall,
                                          requests_per_s=1 / wall, wall_s=wall))
            continue
        requests = fixed_requests(running, cfg.prompt_tokens, cfg.new_tokens, batch)
        if requests[0].token_ids is not None:
            running.warm([ids for r in requests if (ids := r.token_ids) is not None], cfg.new_tokens)  # all of them

        async def body(channel: Channel, requests: list[GenerationRequest] = requests, batch: int = batch) -> list[float]:
            await _timed(channel, requests, batch)  # warm-up at this shape
            return [level_duration(await _timed(channel, requests, batch)) for _ in range(cfg.repeats)]

        # All `batch` requests are sent at once: the in-process batcher runs them as one batch.
        walls = on_engine(running, Batching(batch, BATCH_GATHER_MS), body)
        wall = sorted(walls)[len(walls) // 2]  # median: robust to a noisy neighbour
        points.append(ThroughputPoint(batch_size=batch, output_tokens_per_s=batch * cfg.new_tokens / wall,
                                      requests_per_s=batch / wall, wall_s=wall))
    return points


# Requests sent at once reach the batcher within microseconds of each other; it waits at most this
# long for the batch to fill, and starts as soon as it holds all of them.
BATCH_GATHER_MS = 200.0
