"""Runs in selector's venv: one timed selector evaluation in a fresh process, as lm-eval's worker
runs in one, so both tools start each run equally cold (model load not timed for either).

    python benchmarks/selector_eval_worker.py spec.json out.json

spec: model, precision, batch_size, threads, evalset, tasks, limit.
"""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(spec_path: str, out_path: str) -> None:
    spec = json.load(open(spec_path, encoding="utf-8"))
    import torch

    torch.set_num_threads(spec["threads"])
    from benchmarks.common import compose, load_selector_model
    from benchmarks.vs_lm_eval import run_selector
    from selector.engines.inprocess.evaluator import TransformersEvaluator

    cfg = compose(spec["model"], spec["precision"])
    _, loaded, load_s = load_selector_model(cfg)
    engine = TransformersEvaluator(loaded.model, loaded.tokenizer, spec["batch_size"], cfg.engine.max_batch_tokens)
    result = run_selector(engine, cfg, Path(spec["evalset"]), spec["tasks"], spec["limit"])
    result.update({"load_s": load_s, "torch_threads": torch.get_num_threads(),
                   "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024})
    json.dump(result, open(out_path, "w", encoding="utf-8"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
