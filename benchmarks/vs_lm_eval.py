"""selector vs lm-evaluation-harness on the same model, items, prompts, few-shot examples, decoding
and batch size, in one run: per-task scores from both, the share of identical predictions, and the
wall time and examples/second of each.

    python -m benchmarks.vs_lm_eval                               # SmolLM2-135M, bf16, batch 8, 3 runs
    python -m benchmarks.vs_lm_eval --model qwen2.5-coder-1.5b --repeats 1
    python -m benchmarks.vs_lm_eval --profile                     # + where selector's time goes

lm-eval runs from its own venv (benchmarks/.venv-lmeval, $SELECTOR_LMEVAL_VENV or --lmeval-venv;
see benchmarks/README.md). Each task is exported (selector.tasks.lmeval.export.export_task) in the prompt
style selector uses for this model; chat-style tasks run in lm-eval with --apply_chat_template
--fewshot_as_multiturn, plain ones without. Runs alternate (lm-eval, selector, lm-eval, ...) so a
neighbour's load falls on both. Results: benchmarks/results/vs_lm_eval-<model>-<precision>.json/.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import tables
from benchmarks.common import (
    REPO_ROOT, BenchmarkError, NeighbourCpu, compose, load_average, load_selector_model, machine_when_quiet, peer_python,
    peer_versions, run_worker, say, write_results,
)
from selector.paths import DEFAULT_EVALSET

NOTE_CODE = ("code tasks (metric code_tests) are left out: selector scores them by running the generated code "
             "against the row's asserts in its sandbox, and lm-eval has no sandboxed code metric to compare with")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.vs_lm_eval", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m", help="a selector model config name (selector/conf/model)")
    p.add_argument("--precision", default="bf16", choices=("bf16", "fp32"),
                   help="a native precision: lm-eval loads the same weights in the same dtype")
    p.add_argument("--evalset", type=Path, default=DEFAULT_EVALSET)
    p.add_argument("--tasks", nargs="+", help="only these tasks of the eval set")
    p.add_argument("--limit", type=int, help="the first N items of each task (a quick check, not a result)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--threads", type=int, default=2, help="torch threads, the same for both tools")
    p.add_argument("--repeats", type=int, default=3, help="timed runs of each tool; the median is reported")
    p.add_argument("--lmeval-venv", type=Path, help="lm-eval's venv (default $SELECTOR_LMEVAL_VENV or "
                                                    "benchmarks/.venv-lmeval)")
    p.add_argument("--max-load", type=float, default=None,
                   help="wait (up to --wait-s) until the 1-minute load average is below this before measuring")
    p.add_argument("--wait-s", type=float, default=1800)
    p.add_argument("--profile", action="store_true", help="also profile one selector pass with pyinstrument")
    p.add_argument("--noise-floor", action="store_true",
                   help="also run selector at batch size 1: how many predictions rounding alone changes "
                        "(another batch composition, the same prompts)")
    p.add_argument("--timeout-s", type=float, default=3600, help="per lm-eval run")
    p.add_argument("--out", type=Path, default=None, help="results folder (default benchmarks/results)")
    return p.parse_args(argv)


def exportable(tasks: list[Any]) -> tuple[list[Any], list[str]]:
    from selector.tasks.lmeval.export import NOT_EXPORTABLE

    keep = [t for t in tasks if t.metric not in NOT_EXPORTABLE]
    skipped = [t.name for t in tasks if t.metric in NOT_EXPORTABLE]
    return keep, skipped


def lmeval_name(task: str) -> str:
    import re

    from selector.tasks.lmeval.export import PREFIX

    return re.sub(r"[^A-Za-z0-9_]", "_", PREFIX + task)


def run_selector(engine: Any, cfg: Any, evalset: Path, names: list[str], limit: int | None) -> dict[str, Any]:
    """One timed selector pass over the tasks: load them, evaluate each, as a sweep's variant does."""
    from selector.tasks import load_evalset
    from selector.tasks.evaluate import evaluate_task
    from selector.tasks.prompts import resolve_style

    start = time.perf_counter()
    tasks = load_evalset(evalset, names, limit)
    out = {}
    for task in tasks:
        t0 = time.perf_counter()
        result, records = evaluate_task(engine, task, cfg.model.name, cfg.model.prompt_style)
        style = resolve_style(task, cfg.model.name, cfg.model.prompt_style)
        items = []
        for item, rec in zip(task.items, records):
            lps = rec.extra.get("logprobs")
            items.append({"id": rec.id, "prompt": rec.prompt, "prediction": rec.output, "score": rec.score,
                          "logprobs": [lps[c] for c in task.choices_for(item)] if lps else None})
        out[task.name] = {"metric": task.metric, "score": result.value, "ci": [result.ci_low, result.ci_high],
                          "style": style, "wall_s": time.perf_counter() - t0, "items": items}
    return {"wall_s": time.perf_counter() - start, "tasks": out}


def profile_selector(engine: Any, cfg: Any, evalset: Path, names: list[str], limit: int | None,
                     out_dir: Path, stem: str) -> dict[str, Any]:
    """One extra (untimed) selector pass under pyinstrument: the call tree as text and HTML."""
    from pyinstrument import Profiler

    profiler = Profiler(interval=0.005)
    profiler.start()
    run_selector(engine, cfg, evalset, names, limit)
    profiler.stop()
    flat = profiler.output_text(unicode=False, color=False, flat=True, time="percent_of_total")
    tree = profiler.output_text(unicode=False, color=False, show_all=False)
    top = [line for line in flat.splitlines() if "%" in line][:25]
    (out_dir / f"{stem}.profile.txt").write_text(
        "Self time by function (pyinstrument, one untimed selector pass):\n" + "\n".join(top)
        + "\n\nCall tree (library frames folded):\n" + tree, encoding="utf-8")
    return {"file": f"{stem}.profile.txt", "top_self_time": top[:15]}


def explain_mismatches(engine: Any, cfg: Any, tasks: list[Any], comparisons: list[dict[str, Any]]) -> None:
    """For each item whose predictions differ, how close the call was. Generation: run the prompt
    alone (batch 1, no padding) up to the first token where the two outputs part, and give the
    log-probability gap between the two candidates there (the other candidate of an output that
    ended is end-of-turn). Multiple choice: the gap between the two picked choices, from each tool.
    A gap of a few hundredths of a nat is a near-tie that rounding decides."""
    import torch

    from selector.tasks.prompts import build_requests

    by_name = {t.name: t for t in tasks}
    for row in comparisons:
        task = by_name[row["task"]]
        if not row["mismatches"] or task.type != "generate":
            for m in row["mismatches"]:
                if m.get("selector_logprobs"):
                    choices = task.choices_for(task.items[[i.id for i in task.items].index(m["id"])])
                    a, b = choices.index(m["selector"]), choices.index(m["lm_eval"])
                    m["gap_selector_nats"] = m["selector_logprobs"][a] - m["selector_logprobs"][b]
                    m["gap_lm_eval_nats"] = m["lm_eval_logprobs"][b] - m["lm_eval_logprobs"][a]
            continue
        requests = build_requests(task, cfg.model.name, cfg.model.prompt_style)
        ids = [i.id for i in task.items]
        for m in row["mismatches"]:
            prompt = engine.encode(requests[ids.index(m["id"])].prompt)
            ours = engine.tok(m["selector"], add_special_tokens=False)["input_ids"]
            theirs = engine.tok(m["lm_eval"], add_special_tokens=False)["input_ids"]
            k = 0
            while k < min(len(ours), len(theirs)) and ours[k] == theirs[k]:
                k += 1
            x = torch.tensor([prompt + ours[:k]], device=engine.device)
            with torch.inference_mode():
                logp = torch.log_softmax(engine.model(input_ids=x).logits[0, -1].float(), dim=-1)
            cand = [ours[k] if k < len(ours) else None, theirs[k] if k < len(theirs) else None]
            # An output that ended here ended on end-of-turn or a stop string: take the likelier ending.
            ends = engine.eos_ids + [engine.tok(s, add_special_tokens=False)["input_ids"][0]
                                     for s in task.stop[row["style"]] if s]
            lp = [float(logp[c]) if c is not None else max(float(logp[e]) for e in ends) for c in cand]
            m["first_difference_token"] = k
            m["gap_nats"] = lp[0] - lp[1]  # > 0: alone, the model prefers selector's token
            m["alone_prefers"] = "selector" if lp[0] > lp[1] else "lm_eval"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import torch

    from selector.engines.inprocess.evaluator import TransformersEvaluator
    from selector.tasks import load_evalset
    from selector.tasks.lmeval.export import export_task
    from selector.tasks.prompts import resolve_style

    out_dir = args.out or (REPO_ROOT / "benchmarks" / "results")
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = compose(args.model, args.precision)
    dtype = cfg.precision.dtype
    tasks, skipped = exportable(load_evalset(args.evalset, args.tasks, args.limit))
    if not tasks:
        raise BenchmarkError("no task of this eval set can be scored by lm-eval")
    styles = {t.name: resolve_style(t, cfg.model.name, cfg.model.prompt_style) for t in tasks}
    python = peer_python("lm-eval", args.lmeval_venv)
    torch.set_num_threads(args.threads)
    from selector import models

    resolved = models.resolve(cfg.model, Path(cfg.cache_dir), precision=cfg.precision.name, dtype=cfg.precision.dtype,
                              progress=False)
    stem = f"vs_lm_eval-{cfg.model.name}-{args.precision}"
    names = [t.name for t in tasks]
    sel_spec = {"model": cfg.model.name, "precision": args.precision, "batch_size": args.batch_size,
                "threads": args.threads, "evalset": str(args.evalset.resolve()), "tasks": names, "limit": args.limit}

    with tempfile.TemporaryDirectory(prefix="selector-lmeval-tasks-") as include:
        for task in tasks:
            export_task(task, include, styles[task.name])
        groups = [{"tasks": [lmeval_name(t.name) for t in tasks if styles[t.name] == style], "chat": style == "chat"}
                  for style in ("plain", "chat")]
        spec = {"model_path": resolved.path, "dtype": dtype, "batch_size": args.batch_size, "threads": args.threads,
                "include_path": include, "groups": [g for g in groups if g["tasks"]]}
        info = machine_when_quiet(args.threads, args.max_load, args.wait_s)
        lm_runs, sel_runs = [], []
        neighbours = NeighbourCpu()
        for run in range(args.repeats):  # alternate, each in a fresh process: a neighbour's load falls on both
            say(f"run {run + 1}/{args.repeats}: lm-eval ...")
            lm_runs.append(run_worker(python, "lmeval_worker.py", spec, args.threads, args.timeout_s,
                                      log=out_dir / "logs" / f"{stem}.lmeval.{run + 1}.log"))
            say(f"  lm-eval: {lm_runs[-1]['eval_wall_s']:.1f} s; selector ...")
            sel_runs.append(run_worker(Path(sys.executable), "selector_eval_worker.py", sel_spec, args.threads,
                                       args.timeout_s, log=out_dir / "logs" / f"{stem}.selector.{run + 1}.log"))
            say(f"  selector: {sel_runs[-1]['wall_s']:.1f} s (load average {load_average()})")
        info["load_average_end"] = load_average()
        info["neighbours_during_runs"] = neighbours.read()

    # Untimed, in this process: what the tables explain (mismatches, noise floor, profile).
    say(f"loading {cfg.model.name} ({args.precision}) to explain the results ...")
    _, loaded, _ = load_selector_model(cfg)
    engine = TransformersEvaluator(loaded.model, loaded.tokenizer, args.batch_size, cfg.engine.max_batch_tokens)
    load_s = median([r["load_s"] for r in sel_runs])
    profile = profile_selector(engine, cfg, args.evalset, names, args.limit, out_dir, stem) if args.profile else None
    noise_floor = None
    if args.noise_floor:
        say("noise floor: selector at batch size 1 ...")
        single = TransformersEvaluator(loaded.model, loaded.tokenizer, 1, cfg.engine.max_batch_tokens)
        alone = run_selector(single, cfg, args.evalset, names, args.limit)
        noise_floor = {name: {"n": len(v["items"]), "same_prediction": sum(
            a["prediction"] == b["prediction"] for a, b in zip(v["items"], sel_runs[0]["tasks"][name]["items"]))}
            for name, v in alone["tasks"].items()}

    comparisons = []
    first_lm, first_sel = lm_runs[0], sel_runs[0]
    for task in tasks:
        theirs = first_lm["tasks"][lmeval_name(task.name)]
        ours = first_sel["tasks"][task.name]
        lm_items = [{"id": ours["items"][i["doc_id"]]["id"], "prompt": i["context"], "prediction": i["prediction"],
                     "score": i["score"], "logprobs": i["logprobs"]} for i in theirs["items"]]
        row = tables.compare_task(task.name, task.metric, ours["items"], lm_items, theirs["score"])
        row.update({"style": ours["style"], "lm_eval_metric": theirs["metric"], "lm_eval_stderr": theirs["stderr"],
                    "selector_ci": ours["ci"], "lm_eval_chat_template": theirs["chat"]})
        comparisons.append(row)
    explain_mismatches(engine, cfg, tasks, comparisons)
    total = tables.agreement_total(comparisons)
    n_items = sum(len(t.items) for t in tasks)
    speed = tables.throughput([r["wall_s"] for r in sel_runs], [r["eval_wall_s"] for r in lm_runs], n_items)
    stable = {
        "selector": all(r["tasks"][t]["items"] == first_sel["tasks"][t]["items"] for r in sel_runs for t in r["tasks"]),
        "lm_eval": all([i["prediction"] for i in r["tasks"][t]["items"]] ==
                       [i["prediction"] for i in first_lm["tasks"][t]["items"]] for r in lm_runs for t in r["tasks"]),
    }
    chat_tasks = [t.name for t in tasks if styles[t.name] == "chat"]
    plain_tasks = [t.name for t in tasks if styles[t.name] == "plain"]
    notes = [NOTE_CODE] if skipped else []
    if chat_tasks:
        notes.append(f"chat-style tasks ({', '.join(chat_tasks)}) ran in lm-eval with --apply_chat_template "
                     f"--fewshot_as_multiturn; plain ones ({', '.join(plain_tasks) or 'none'}) without, in a second "
                     "evaluate() call: lm-eval applies a chat template to a whole run, selector per task")
    notes.append(f"timed: from loading the tasks to their scores, on a loaded model, each run of each tool in a fresh "
                 f"process. Not timed: model load "
                 f"(selector {load_s:.1f} s, lm-eval {median([r['load_s'] for r in lm_runs]):.1f} s), lm-eval's "
                 f"import ({median([r['import_s'] for r in lm_runs]):.1f} s) and index of its built-in tasks "
                 f"({median([r['index_s'] for r in lm_runs]):.1f} s); a whole lm-eval process took "
                 f"{median([r['process_wall_s'] for r in lm_runs]):.1f} s")
    notes.append(f"{cfg.model.name}: {cfg.model.notes}" if cfg.model.notes else "")
    notes = [n for n in notes if n]
    data = {
        "benchmark": "vs_lm_eval", "machine": info,
        "peers": {"lm-eval": peer_versions(python, ["lm_eval", "torch", "transformers", "datasets"])},
        "settings": {"model": cfg.model.name, "precision": args.precision, "dtype": dtype,
                     "batch_size": args.batch_size, "threads": args.threads, "repeats": args.repeats,
                     "evalset": str(args.evalset.name),
                     "limit": args.limit, "skipped_tasks": skipped, "styles": styles,
                     "max_batch_tokens": cfg.engine.max_batch_tokens},
        "tasks": comparisons, "agreement": total, "throughput": speed, "predictions_stable_across_runs": stable,
        "selector_runs": [{"wall_s": r["wall_s"], "task_wall_s": {k: v["wall_s"] for k, v in r["tasks"].items()},
                           **{k: r[k] for k in ("load_s", "process_wall_s", "process_cpu_s", "peak_rss_bytes",
                                                "torch_threads")}} for r in sel_runs],
        "lm_eval_runs": [{k: r[k] for k in ("eval_wall_s", "load_s", "import_s", "index_s", "process_wall_s",
                                            "process_cpu_s", "peak_rss_bytes", "torch_threads", "groups")}
                         for r in lm_runs],
        "selector_load_s": load_s, "profile": profile, "noise_floor_batch1": noise_floor, "notes": notes,
    }
    md = render_markdown(data)
    json_path, md_path = write_results(stem, data, md, out_dir)
    print(md)
    say(f"wrote {json_path} and {md_path}")
    return 0


def median(values: list[float]) -> float:
    return tables.median(values)


def render_markdown(data: dict[str, Any]) -> str:
    s = data["settings"]
    lines = [f"# selector vs lm-eval: {s['model']} ({s['precision']}), batch {s['batch_size']}\n",
             tables.machine_markdown(data["machine"], data["peers"]), "\n## Accuracy agreement\n",
             tables.accuracy_markdown(data["tasks"], data["agreement"])]
    share = data["agreement"]["same_prediction_share_where_prompt_same"]
    lines.append(f"\nIdentical predictions where the prompts are identical: {tables.pct(share)}.\n")
    mismatches = [(t["task"], m) for t in data["tasks"] for m in t["mismatches"]]
    if mismatches:
        lines.append("\nItems whose predictions differ:\n")
        rows = [[task, m["id"], repr(m["selector"]), repr(m["lm_eval"]), "yes" if m["same_prompt"] else "no",
                 tables.gap_text(m)] for task, m in mismatches]
        lines.append(tables.markdown_table(["task", "id", "selector", "lm-eval", "same prompt",
                                            "how close (log-prob gap, nats)"], rows))
    if data.get("noise_floor_batch1"):
        nf = data["noise_floor_batch1"]
        same, n = sum(v["same_prediction"] for v in nf.values()), sum(v["n"] for v in nf.values())
        lines.append(f"\nNoise floor: selector at batch size 1 against selector at batch size {s['batch_size']} (same "
                     f"prompts, other padding and matrix shapes): {same}/{n} identical predictions ("
                     + ", ".join(f"{k} {v['same_prediction']}/{v['n']}" for k, v in nf.items()) + ").\n")
    lines += ["\n## Evaluation throughput\n", tables.throughput_markdown(data["throughput"], s["batch_size"])]
    if data.get("profile"):
        lines += ["\nWhere selector's time goes (pyinstrument, self time, top entries; full profile in "
                  f"{data['profile']['file']}):\n\n```\n", "\n".join(data["profile"]["top_self_time"][:12]), "\n```\n"]
    lines += ["\n## Notes\n"] + [f"- {n}\n" for n in data["notes"]]
    return "".join(lines)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchmarkError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
