"""Runs in selector's venv: selector's latency measurement on one model at several batch sizes, in a
process of its own (as optimum-benchmark's worker is), so both processes' memory means the same.

    python benchmarks/selector_latency_worker.py spec.json out.json      (PYTHONPATH = the repo root)

spec: model, precision, threads, batch_sizes, prompt_tokens, new_tokens, warmup, repeats.
Each batch size runs timed_generate (below: one greedy `generate` of exactly new_tokens tokens, a
clock stamp at every decoding step, as the in-process engine's batcher times the requests of
measure_latency and measure_throughput) with measure_latency's arithmetic; at batch 1
measure_latency itself runs too, through the in-process engine, as a check that the two agree.

A logits processor runs once per decoding step, right after the forward pass that produced the
step's logits; stamping the clock there (after a device synchronize on CUDA) gives the time to first
token and the gap between tokens without changing what is generated.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class _StepClock:
    def __init__(self, sync: bool) -> None:
        self.sync, self.stamps = sync, []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.sync:
            torch.cuda.synchronize()
        self.stamps.append(time.perf_counter())
        return scores


@torch.inference_mode()
def timed_generate(model: Any, input_ids: torch.Tensor, new_tokens: int, pad_id: int) -> tuple[float, list[float]]:
    """Generate exactly `new_tokens` greedy tokens; return (start time, per-step timestamps)."""
    sync = input_ids.device.type == "cuda"
    clock = _StepClock(sync)
    generate = model.generate
    if sync:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    generate(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,  # ignore end-of-sequence: every run does the same work
        do_sample=False,
        num_beams=1,
        pad_token_id=pad_id,
        logits_processor=[clock],
    )
    if sync:
        torch.cuda.synchronize()
    clock.stamps.append(time.perf_counter())
    return t0, clock.stamps


def main(spec_path: str, out_path: str) -> None:
    spec = json.load(open(spec_path, encoding="utf-8"))
    torch.set_num_threads(spec["threads"])
    from benchmarks.common import compose, load_selector_model
    from benchmarks.tables import median
    from selector.config import LatencyConfig
    from selector.measure.latency import measure_latency
    from selector.resources.memory import peak_rss_bytes, weight_bytes
    from selector.measure.timing import synthetic_prompt

    cfg = compose(spec["model"], spec["precision"])
    resolved, loaded, load_s = load_selector_model(cfg)
    model, tok = loaded.model, loaded.tokenizer
    rss_after_load = peak_rss_bytes()
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    n_new, points = spec["new_tokens"], []
    for batch in spec["batch_sizes"]:
        ids = torch.tensor([synthetic_prompt(tok, spec["prompt_tokens"], variant=7 * r) for r in range(batch)])
        prefill, decode, per_token, whole = [], [], [], []
        for run in range(spec["warmup"] + spec["repeats"]):
            t0, stamps = timed_generate(model, ids, n_new, pad)
            if run < spec["warmup"]:
                continue
            steps = stamps[:-1]  # one stamp per decoding step; the last is the end of generate()
            prefill.append(steps[0] - t0)
            decode.append(stamps[-1] - steps[0])
            per_token.append((steps[-1] - steps[0]) / (len(steps) - 1))
            whole.append(stamps[-1] - t0)
        points.append({"batch_size": batch, "prefill_s": prefill, "decode_s": decode, "per_token_s": per_token,
                       "generate_s": whole, "prefill_p50_s": median(prefill), "decode_p50_s": median(decode),
                       "per_token_p50_s": median(per_token), "generate_p50_s": median(whole),
                       "torch_threads": torch.get_num_threads()})
    check = None
    if 1 in spec["batch_sizes"]:
        from selector.engines.inprocess.engine import HfEngineConfig, InProcessRunning

        lat = measure_latency(InProcessRunning(HfEngineConfig(), loaded),
                              LatencyConfig(enabled=True, warmup=spec["warmup"], repeats=spec["repeats"],
                                            prompt_tokens=spec["prompt_tokens"], new_tokens=n_new))
        check = {"ttft_p50_ms": lat.ttft_ms.p50, "tpot_p50_ms": lat.tpot_ms.p50, "e2e_p50_ms": lat.e2e_ms.p50}
    answer = {"points": points, "measure_latency_batch1": check, "load_s": load_s,
              "peak_rss_bytes": peak_rss_bytes(), "peak_rss_after_load_bytes": rss_after_load,
              "weight_bytes": weight_bytes(model), "model_path": resolved.path, "dtype": cfg.precision.dtype}
    json.dump(answer, open(out_path, "w", encoding="utf-8"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
