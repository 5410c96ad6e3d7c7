"""Prove selector's CUDA paths on a GPU machine: each precision through its backend and measurement.

    python scripts/gpu_check.py --out gpu_check.json                 (or scripts/gpu_check.sh)
    python scripts/gpu_check.py --arch qwen2.5-7b --out gpu_check.json

Without --arch the model is a small random Llama with a tokenizer trained on the spot (as in
tests/tiny.py), through fp16, int8, gptq-int4 and awq-int4. With --arch NAME it is the
architecture of selector/conf/arch/NAME.json (or a config.json path) with random weights, built on the
device, saved as safetensors and quantized here with a small calibration budget (16 x 256 tokens),
through bf16, awq-int4, gptq-int4 and int8, and then checked (scripts/gpu_arch.py): weights and
peak memory against `python -m selector plan`, int4 weights against bf16's, bf16's time per token
against the memory-bandwidth floor, int4's against bf16's. Nothing is downloaded either way.

Each precision is loaded through selector's own precision backends (selector/precisions/), then
measured with selector's latency code (CUDA-synchronised timestamps per decoding step) on the
in-process engine's fast path (engine.compile: static KV cache + compiled decode step; compile
time reported apart) and torch.cuda.max_memory_allocated, and checked against the 16-bit
reference (top-1 agreement of next-token predictions). One JSON file holds every result; a
precision that fails is recorded with its error and the others still run. --budget-s bounds the
whole run: a step that would not fit is skipped, saying so.

Exit codes: 0 all precisions ran (and every check passed), 1 otherwise, 3 no CUDA device here.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # selector and tests/tiny.py from this checkout
sys.path.insert(0, str(ROOT / "scripts"))

from gpu_arch import ARCH_PRECISIONS, Budget, Deadline, arch_checks, arch_path, build_random, estimate_s  # noqa: E402

PRECISIONS = ("fp16", "int8", "gptq-int4", "awq-int4")
NO_CUDA = 3
PROMPTS = [
    "The food was great and the staff were lovely. Sentiment:",
    "Bob bought 3 apples and 4 pears. How many fruits? Answer:",
    "def add(a, b):\n    return",
    "Order number 4521 was shipped to",
]


def cuda_or_exit(device: str) -> Any:
    try:
        import torch
    except ImportError:
        print("gpu_check: torch is not installed; install selector with a CUDA build of torch.", file=sys.stderr)
        sys.exit(NO_CUDA)
    if device.startswith("cuda") and not torch.cuda.is_available():
        print(
            f"gpu_check: no CUDA device here (torch {torch.__version__}, built for CUDA "
            f"{torch.version.cuda or 'none'}; torch.cuda.is_available() is False). Nothing was run. "
            "Run this on a machine with an NVIDIA GPU and a CUDA build of torch.",
            file=sys.stderr,
        )
        sys.exit(NO_CUDA)
    return torch


def precision_config(name: str) -> Any:
    from omegaconf import OmegaConf

    from selector.config import CONF_DIR, PrecisionConfig

    merged = OmegaConf.merge(OmegaConf.structured(PrecisionConfig), OmegaConf.load(CONF_DIR / "precision" / f"{name}.yaml"))
    return OmegaConf.to_object(merged)


def next_token_ids(torch: Any, model: Any, tokenizer: Any) -> list[int]:
    with torch.inference_mode():
        batch = tokenizer(PROMPTS, return_tensors="pt", padding=True).to(model.device)
        logits = model(**batch).logits[:, -1, :]
    return logits.argmax(-1).tolist()


def engine_around(loaded: Any, setting: str) -> Any:
    """selector's in-process engine around the loaded model, on its fast path (engine.compile), or
    on the plain path with the reason when this model cannot compile."""
    from selector.engines.inprocess.fast import CompileError
    from selector.engines.inprocess.engine import HfEngineConfig, InProcessRunning

    try:
        return InProcessRunning(HfEngineConfig(compile=setting), loaded)
    except CompileError as e:
        running = InProcessRunning(HfEngineConfig(compile="off"), loaded)
        running.hf.fast.note = str(e)
        return running


def measure(torch: Any, loaded: Any, running: Any, args: argparse.Namespace, budget: Budget, cuda: bool,
            params_b: float) -> dict[str, Any]:
    """Latency at batch 1, then throughput at each --batch-sizes that still fits the budget, through
    the in-process engine's own timed requests (as a sweep measures a variant)."""
    from selector.config import LatencyConfig, ThroughputConfig
    from selector.engines.inprocess.fast import CompileError, bucket
    from selector.measure.latency import measure_latency, measure_throughput

    lat_cfg = LatencyConfig(warmup=args.warmup, repeats=args.repeats, prompt_tokens=64, new_tokens=32)
    try:
        latency = measure_latency(running, lat_cfg)
    except CompileError as e:  # only with --compile on: record why, measure the plain path
        running = engine_around(loaded, "off")
        running.hf.fast.note = str(e)
        latency = measure_latency(running, lat_cfg)
    fast = running.hf.fast
    points, skipped = [], []
    for bs in args.batch_sizes:
        need = estimate_s("measure", params_b, cuda) + (estimate_s("compile", params_b, cuda) if fast.active else 0)
        if not budget.fits(need):
            skipped.append(f"batch {bs}: needs about {need:.0f} s, {budget.left():.0f} s left")
            continue
        cfg = ThroughputConfig(batch_sizes=[bs], prompt_tokens=64, new_tokens=32, repeats=max(1, args.repeats // 5))
        points += measure_throughput(running, cfg)
    context = bucket(64 + 32) if fast.active else 64 + 32
    return {"latency": latency.model_dump(), "throughput": [p.model_dump() for p in points],
            "throughput_skipped": skipped, "fast": fast,
            "shape": {"batch": max([1, *(p.batch_size for p in points)]), "context": context}}


def check_one(torch: Any, name: str, model_cfg: Any, work: Path, args: argparse.Namespace,
              budget: Budget, params_b: float) -> dict[str, Any]:
    device = args.device
    cuda = device.startswith("cuda")
    from selector.config import CalibrationConfig
    from selector.resources.memory import first_linear, measure_memory
    from selector.precisions import get_backend, load_variant

    precision = precision_config(name)
    backend = get_backend(precision.backend)
    ok, why = backend.availability(precision, device)
    if not ok:
        return {"precision": name, "status": "unavailable", "reason": why}
    # bitsandbytes and gptqmodel checkpoints are never compiled (transformers refuses them).
    compiles = (args.compile == "on" or (args.compile == "auto" and cuda)) and precision.backend not in ("bnb", "gptqmodel")
    need = (estimate_s(f"load:{precision.backend}", params_b, cuda) + estimate_s("measure", params_b, cuda)
            + (estimate_s("compile", params_b, cuda) if compiles else 0))
    if not budget.fits(need):
        return {"precision": name, "status": "skipped",
                "reason": f"needs about {need:.0f} s by the estimate, {budget.left():.0f} s of the budget left"}
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    calibration = CalibrationConfig(num_samples=args.calibration_samples, seq_len=args.calibration_len)
    t0 = time.perf_counter()
    _, loaded = load_variant(model_cfg, precision, work / "cache", device, calibration=calibration, progress=False)
    if cuda:
        torch.cuda.synchronize()
    load_s = time.perf_counter() - t0
    budget.record(f"{name}: load", load_s)
    peak_load = torch.cuda.max_memory_allocated() if cuda else None
    if cuda:
        torch.cuda.reset_peak_memory_stats()  # from here on: what serving it takes
    t0 = time.perf_counter()
    measured = measure(torch, loaded, engine_around(loaded, args.compile), args, budget, cuda, params_b)
    budget.record(f"{name}: measure", time.perf_counter() - t0)
    fast = measured.pop("fast")
    memory = measure_memory(loaded.model, device, None)
    result = {
        "precision": name,
        "status": "ok",
        "backend": precision.backend,
        "method": precision.method,
        "bits": precision.bits,
        "load_s": round(load_s, 2),
        "quant": loaded.quant.model_dump() if loaded.quant else None,
        "notes": loaded.notes,
        "kernel": loaded.kernel.model_dump() if loaded.kernel else None,  # which kernel ran, packed or not
        "weight_bytes": memory.weight_bytes,
        "cuda_max_allocated_bytes": max(peak_load or 0, memory.cuda_max_allocated_bytes or 0) if cuda else None,
        "cuda_max_reserved_bytes": memory.cuda_max_reserved_bytes,
        "cuda_peak_load_bytes": peak_load,
        "cuda_peak_serving_bytes": memory.cuda_max_allocated_bytes,
        "fast_path": {"setting": fast.setting, "active": fast.active, "compile_s": round(fast.compile_s, 2),
                      "note": fast.note},
        **measured,
        "next_tokens": next_token_ids(torch, loaded.model, loaded.tokenizer),
        "first_linear": first_linear(loaded.model),
        "linear_classes": sorted({type(m).__name__ for m in loaded.model.modules() if "Linear" in type(m).__name__}),
    }
    del loaded, fast
    release(torch, cuda)
    return result


def release(torch: Any, cuda: bool) -> None:
    """Free the variant: its compiled graphs (and their CUDA graph memory) go with dynamo's caches."""
    gc.collect()
    torch._dynamo.reset()
    if cuda:
        torch.cuda.empty_cache()


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("gpu_check.json"), help="where to write the JSON results")
    parser.add_argument("--arch", help="selector/conf/arch/NAME.json (or a config.json path): that architecture, random weights")
    parser.add_argument("--precisions", help=f"comma-separated selector/conf/precision names (default {','.join(PRECISIONS)}; "
                                             f"with --arch {','.join(ARCH_PRECISIONS)})")
    parser.add_argument("--hidden", type=int, default=256, help="hidden size of the tiny model (a multiple of 128)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--warmup", type=int, help="latency warm-up runs (default 3; with --arch 1)")
    parser.add_argument("--repeats", type=int, help="latency runs (default 20; with --arch 5)")
    parser.add_argument("--batch-sizes", help="throughput batch sizes after batch-1 latency, e.g. 8 (default 8; with "
                                              "--arch none: each new shape compiles again, ~40 s for a 7B model)")
    parser.add_argument("--compile", default="auto", choices=("auto", "on", "off"),
                        help="engine.compile for the measurements (auto: on for CUDA)")
    parser.add_argument("--calibration-samples", type=int, default=16)
    parser.add_argument("--calibration-len", type=int, default=256)
    parser.add_argument("--budget-s", type=float, default=320.0,
                        help="the whole run's time budget; steps that would not fit are skipped (default 320)")
    parser.add_argument("--workdir", type=Path, help="where the model and quantized artifacts go (default: a temp dir)")
    parser.add_argument("--device", default="cuda:0",
                        help="cuda:N; 'cpu' only checks the script's plumbing (its figures are not GPU figures)")
    args = parser.parse_args(argv)
    args.precisions = args.precisions or ",".join(ARCH_PRECISIONS if args.arch else PRECISIONS)
    # A real architecture's steps are long: fewer runs (a 7B decode step is milliseconds, its
    # compile a minute), and only the batch-1 shape the checks need.
    args.warmup = args.warmup if args.warmup is not None else (1 if args.arch else 3)
    args.repeats = args.repeats if args.repeats is not None else (5 if args.arch else 20)
    batch_sizes = args.batch_sizes if args.batch_sizes is not None else ("" if args.arch else "8")
    args.batch_sizes = [int(b) for b in batch_sizes.split(",") if b.strip()]
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    budget = Budget(args.budget_s)
    torch = cuda_or_exit(args.device)
    cuda = args.device.startswith("cuda")

    from selector import models
    from selector.config import ModelConfig, SourceConfig
    from selector.measure.environment import environment
    from tests.tiny import build_tiny_llama

    names = [p.strip() for p in args.precisions.split(",") if p.strip()]
    configs = {n: precision_config(n) for n in names}
    results: list[dict[str, Any]] = []
    report: dict[str, Any] = {"device": args.device, "budget_s": args.budget_s}
    budget.arm()
    try:
        with tempfile.TemporaryDirectory(prefix="gpu_check", dir=args.workdir) as tmp:
            work = Path(tmp)
            if args.arch:
                arch_json = arch_path(args.arch)
                params_b = _arch_params(arch_json) / 1e9
                need = estimate_s("build", params_b, cuda)
                if not budget.fits(need):
                    raise Deadline(f"building it needs about {need:.0f} s by the estimate, "
                                   f"{budget.left():.0f} s of the budget left")
                print(f"gpu_check: building {arch_json.stem} ({params_b:.2f} B parameters) on {args.device} ...", flush=True)
                t0 = time.perf_counter()
                folder, params = build_random(torch, arch_json, work / arch_json.stem, args.device)
                budget.record("build and save", time.perf_counter() - t0)
                report["model"] = {"arch": arch_json.stem, "config": str(arch_json.relative_to(ROOT))
                                   if arch_json.is_relative_to(ROOT) else arch_json.name, "parameters": params,
                                   "build_estimate_s": round(need, 1), "note": "random weights, built here"}
                name = f"gpu-check-{arch_json.stem}"
            else:
                folder = build_tiny_llama(work / "tiny", hidden=args.hidden, layers=args.layers)
                params_b = 0.0
                report["model"] = {"hidden": args.hidden, "layers": args.layers, "note": "random weights, built here"}
                name = "gpu-check-tiny"
            model_cfg = ModelConfig(name=name, family="gpu-check", source=SourceConfig(kind="local", path=str(folder)))
            models.resolve(model_cfg, work / "cache", progress=False)  # converted once, before any load is timed
            report["bandwidth_bytes_per_s"] = _bandwidth(args.device) if cuda else None
            for n in names:
                print(f"gpu_check: {n} ...", flush=True)
                try:
                    results.append(check_one(torch, n, model_cfg, work, args, budget, params_b))
                except Deadline as e:
                    results.append({"precision": n, "status": "stopped", "reason": f"{e} while it ran"})
                    break
                except Exception as e:  # one broken backend must not hide the others' results
                    results.append({"precision": n, "status": "failed", "error": f"{type(e).__name__}: {e}",
                                    "traceback": traceback.format_exc()[-4000:]})
                    release(torch, cuda)
                print(f"gpu_check: {n}: {results[-1]['status']}", flush=True)
            done = {r["precision"] for r in results}
            results += [{"precision": n, "status": "skipped", "reason": "the budget ran out before it started"}
                        for n in names if n not in done]
            if args.arch:
                report["checks"] = arch_checks(results, configs, arch_json, work / "cache", args.device,
                                               report["bandwidth_bytes_per_s"])
    except Deadline as e:  # before or while building: nothing measured
        report["stopped"] = str(e)
        results = results or [{"precision": n, "status": "skipped", "reason": f"not started: {e}"} for n in names]
    finally:
        budget.disarm()
    _add_agreement(results)
    props = torch.cuda.get_device_properties(torch.device(args.device)) if cuda else None
    report.update({
        "gpu": props.name if props else None,
        "gpu_memory_bytes": props.total_memory if props else None,
        "capability": f"{props.major}.{props.minor}" if props else None,
        "bf16_supported": torch.cuda.is_bf16_supported() if props else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "environment": environment(args.device),
        "elapsed_s": round(budget.elapsed(), 1),
        "steps": budget.steps,
        "results": results,
    })
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str))
    _print_summary(report)
    print(f"gpu_check: results in {args.out}")
    checks_ok = all(c["status"] in ("pass",) or c["status"].startswith("not applicable") for c in report.get("checks", []))
    return 0 if results and all(r["status"] == "ok" for r in results) and checks_ok and "stopped" not in report else 1


def _arch_params(arch_json: Path) -> int:
    from selector.plan.arch import ArchFacts

    return ArchFacts.from_config(json.loads(arch_json.read_text()), arch_json.name).params


def _bandwidth(device: str) -> float:
    from selector.measure.bandwidth import copy_bandwidth

    return copy_bandwidth(device)


def _add_agreement(results: list[dict[str, Any]]) -> None:
    """Top-1 agreement of each precision's next-token predictions with the 16-bit reference."""
    reference = next((r for r in results if r["precision"] in ("fp16", "bf16") and r["status"] == "ok"), None)
    for r in results:
        if reference is not None and r["status"] == "ok":
            same = sum(a == b for a, b in zip(r["next_tokens"], reference["next_tokens"]))
            r[f"top1_agreement_vs_{reference['precision']}"] = same / len(PROMPTS)


def _print_summary(report: dict[str, Any]) -> None:
    for r in report["results"]:
        line = f"  {r['precision']:10s} {r['status']:11s}"
        if r["status"] == "ok":
            tpot, peak = r["latency"]["tpot_ms"]["p50"], r["cuda_max_allocated_bytes"]
            first = r["first_linear"] or {}
            line += (f" tpot p50 {tpot:8.2f} ms  max allocated {'-' if peak is None else f'{peak / 2**20:8.1f} MiB'}"
                     f"  weights {r['weight_bytes'] / 2**20:9.2f} MiB  compiled {r['fast_path']['active']}"
                     f"  {first.get('class', '?')} at {first.get('module', '?')}")
        else:
            line += " " + r.get("reason", r.get("error", ""))[:160]
        print(line)
    for c in report.get("checks", []):
        extra = {k: v for k, v in c.items() if k in ("precision", "error_pct", "ratio", "tpot_ms", "int4_tpot_ms")}
        print(f"  check {c['check']:34s} {c['status']:24s} {extra}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
