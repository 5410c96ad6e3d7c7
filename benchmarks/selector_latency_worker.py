"""Runs in selector's venv: selector's latency measurement on one model at several batch sizes, in a
process of its own (as optimum-benchmark's worker is), so both processes' memory means the same.

    python benchmarks/selector_latency_worker.py spec.json out.json      (PYTHONPATH = the repo root)

spec: model, precision, threads, batch_sizes, prompt_tokens, new_tokens, warmup, repeats.
Each batch size runs selector.measure.timing.timed_generate (what measure_latency and
measure_throughput time through the in-process engine's batcher: one greedy `generate` of exactly
new_tokens tokens, a clock stamp at every decoding step) with measure_latency's arithmetic; at
batch 1 measure_latency itself runs too, through the in-process engine, as a check that the two agree.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(spec_path: str, out_path: str) -> None:
    spec = json.load(open(spec_path, encoding="utf-8"))
    import torch

    torch.set_num_threads(spec["threads"])
    from benchmarks.common import compose, load_selector_model
    from benchmarks.tables import median
    from selector.config import LatencyConfig
    from selector.measure.latency import measure_latency
    from selector.resources.memory import peak_rss_bytes, weight_bytes
    from selector.measure.timing import synthetic_prompt, timed_generate

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
