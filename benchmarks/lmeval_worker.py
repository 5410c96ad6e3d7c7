"""Runs inside lm-eval's own venv (not selector's): evaluate exported selector tasks with
lm-evaluation-harness and write every item's context, prediction and score as JSON.

    <lm-eval venv>/bin/python benchmarks/lmeval_worker.py spec.json out.json

spec: model_path, dtype, batch_size, threads, include_path, groups: [{tasks: [...], chat: bool}].
A group with chat runs as `lm_eval --apply_chat_template --fewshot_as_multiturn` would. The timed
part of each group is what `lm_eval` does between loading the model and printing results: load the
tasks (their JSONL), build the requests, run the model, score. Model load and lm-eval's index of
its own ~15k built-in tasks are timed apart. Imports nothing from selector.
"""

from __future__ import annotations

import json
import logging
import resource
import sys
import time


def _prediction(sample: dict, output_type: str, choices: list[str] | None) -> tuple[str, list[float] | None]:
    if output_type == "multiple_choice":
        logprobs = [float(r[0]) for r in sample["filtered_resps"]]
        return choices[max(range(len(logprobs)), key=logprobs.__getitem__)], logprobs
    return sample["filtered_resps"][0], None


def _metric_key(task_results: dict) -> str:
    keys = [k for k in task_results if k.endswith(",none") and "_stderr" not in k]
    return keys[0]


def main(spec_path: str, out_path: str) -> None:
    spec = json.load(open(spec_path, encoding="utf-8"))
    import torch

    torch.set_num_threads(spec["threads"])
    logging.getLogger().setLevel(logging.WARNING)
    start = time.perf_counter()
    from lm_eval.evaluator import evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    import_s = time.perf_counter() - start
    start = time.perf_counter()
    lm = HFLM(pretrained=spec["model_path"], dtype=spec["dtype"], device="cpu", batch_size=spec["batch_size"])
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    manager = TaskManager(include_path=spec["include_path"])
    index_s = time.perf_counter() - start

    groups, tasks_out = [], {}
    for group in spec["groups"]:
        start = time.perf_counter()
        loaded = manager.load(group["tasks"])
        for task in loaded["tasks"].values():
            task.set_fewshot_seed(seed=1234)  # as simple_evaluate does; the exported sampler is first_n anyway
        results = evaluate(lm=lm, task_dict=loaded, log_samples=True, apply_chat_template=group["chat"],
                           fewshot_as_multiturn=group["chat"])
        wall = time.perf_counter() - start
        groups.append({"tasks": group["tasks"], "chat": group["chat"], "wall_s": wall})
        for name in group["tasks"]:
            task = loaded["tasks"][name] if name in loaded["tasks"] else None
            output_type = task.get_config("output_type") if task is not None else "generate_until"
            key = _metric_key(results["results"][name])
            items = []
            for sample in sorted(results["samples"][name], key=lambda s: s["doc_id"]):
                choices = task.doc_to_choice(sample["doc"]) if output_type == "multiple_choice" else None
                prediction, logprobs = _prediction(sample, output_type, choices)
                items.append({"doc_id": sample["doc_id"], "context": sample["arguments"][0][0],
                              "prediction": prediction, "logprobs": logprobs,
                              "score": float(sample[key.split(",")[0]])})
            tasks_out[name] = {"metric": key.split(",")[0], "score": float(results["results"][name][key]),
                               "stderr": results["results"][name].get(key.replace(",", "_stderr,")),
                               "output_type": output_type, "chat": group["chat"], "items": items}
    answer = {"import_s": import_s, "load_s": load_s, "index_s": index_s, "groups": groups, "tasks": tasks_out,
              "eval_wall_s": sum(g["wall_s"] for g in groups),
              "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
              "torch_threads": torch.get_num_threads()}
    json.dump(answer, open(out_path, "w", encoding="utf-8"), default=str)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
