"""Prove selector's CUDA paths on a GPU machine: a tiny model through fp16, int8, gptq-int4 and awq-int4.

    python scripts/gpu_check.py --out gpu_check.json            (or scripts/gpu_check.sh)

The model is built here (a small random Llama with a tokenizer trained on the spot, as in
tests/tiny.py): nothing is downloaded. Each precision is loaded through selector's own precision
backends (selector/precisions/: bitsandbytes, gptqmodel, llmcompressor, quantizing locally with the
built-in calibration text), then measured with selector's latency code (CUDA-synchronised
timestamps per decoding step) and torch.cuda.max_memory_allocated, and checked against fp16
(top-1 agreement of next-token predictions). One JSON file holds every result; a precision that
fails is recorded with its error and the others still run.

Exit codes: 0 all precisions ran, 1 at least one failed, 3 no CUDA device here (nothing was run).
"""

from __future__ import annotations

import argparse
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


def check_one(torch: Any, name: str, resolved: Any, model_cfg: Any, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    device = args.device
    cuda = device.startswith("cuda")
    from selector.config import CalibrationConfig, LatencyConfig
    from selector.measure.latency import measure_latency
    from selector.measure.memory import measure_memory
    from selector.precisions import get_backend
    from selector.precisions.base import LoadContext

    precision = precision_config(name)
    backend = get_backend(precision.backend)
    ok, why = backend.availability(precision, device)
    if not ok:
        return {"precision": name, "status": "unavailable", "reason": why}
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    ctx = LoadContext(model_cfg, device, work / "cache", CalibrationConfig(num_samples=16, seq_len=128), progress=False)
    t0 = time.perf_counter()
    loaded = backend.load(resolved, precision, ctx)
    if cuda:
        torch.cuda.synchronize()
    load_s = time.perf_counter() - t0
    latency = measure_latency(loaded.model, loaded.tokenizer,
                              LatencyConfig(warmup=args.warmup, repeats=args.repeats, prompt_tokens=64, new_tokens=32))
    memory = measure_memory(loaded.model, device, None)
    result = {
        "precision": name,
        "status": "ok",
        "backend": precision.backend,
        "method": precision.method,
        "bits": precision.bits,
        "load_s": round(load_s, 2),
        "quant": loaded.quant.model_dump() if loaded.quant else None,
        "weight_bytes": memory.weight_bytes,
        "cuda_max_allocated_bytes": memory.cuda_max_allocated_bytes,
        "cuda_max_reserved_bytes": memory.cuda_max_reserved_bytes,
        "latency": latency.model_dump(),
        "next_tokens": next_token_ids(torch, loaded.model, loaded.tokenizer),
        "linear_classes": sorted({type(m).__name__ for m in loaded.model.modules() if "Linear" in type(m).__name__}),
    }
    del loaded
    if cuda:
        torch.cuda.empty_cache()
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("gpu_check.json"), help="where to write the JSON results")
    parser.add_argument("--precisions", default=",".join(PRECISIONS), help="comma-separated selector/conf/precision names")
    parser.add_argument("--hidden", type=int, default=256, help="hidden size of the tiny model (a multiple of 128)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--device", default="cuda:0",
                        help="cuda:N; 'cpu' only checks the script's plumbing (its figures are not GPU figures)")
    args = parser.parse_args(argv)
    torch = cuda_or_exit(args.device)

    from selector import models
    from selector.config import ModelConfig, SourceConfig
    from selector.measure.environment import environment
    from tests.tiny import build_tiny_llama

    names = [p.strip() for p in args.precisions.split(",") if p.strip()]
    with tempfile.TemporaryDirectory(prefix="gpu_check") as tmp:
        work = Path(tmp)
        folder = build_tiny_llama(work / "tiny", hidden=args.hidden, layers=args.layers)
        model_cfg = ModelConfig(name="gpu-check-tiny", family="tiny", source=SourceConfig(kind="local", path=str(folder)))
        resolved = models.resolve(model_cfg, work / "cache", progress=False)
        results = []
        for name in names:
            print(f"gpu_check: {name} ...", flush=True)
            try:
                results.append(check_one(torch, name, resolved, model_cfg, work, args))
            except Exception as e:  # one broken backend must not hide the others' results
                results.append({"precision": name, "status": "failed", "error": f"{type(e).__name__}: {e}",
                                "traceback": traceback.format_exc()[-4000:]})
            print(f"gpu_check: {name}: {results[-1]['status']}", flush=True)
    reference = next((r for r in results if r["precision"] == "fp16" and r["status"] == "ok"), None)
    for r in results:
        if reference is not None and r["status"] == "ok":
            same = sum(a == b for a, b in zip(r["next_tokens"], reference["next_tokens"]))
            r["top1_agreement_vs_fp16"] = same / len(PROMPTS)
    props = torch.cuda.get_device_properties(torch.device(args.device)) if args.device.startswith("cuda") else None
    report = {
        "device": args.device,
        "gpu": props.name if props else None,
        "gpu_memory_bytes": props.total_memory if props else None,
        "capability": f"{props.major}.{props.minor}" if props else None,
        "bf16_supported": torch.cuda.is_bf16_supported() if props else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "environment": environment(args.device),
        "model": {"hidden": args.hidden, "layers": args.layers, "note": "random weights, built here"},
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str))
    for r in results:
        line = f"  {r['precision']:10s} {r['status']:11s}"
        if r["status"] == "ok":
            e2e = r["latency"]["e2e_ms"]["p50"]
            peak = r["cuda_max_allocated_bytes"]
            line += (f" e2e p50 {e2e:8.1f} ms  max allocated {'-' if peak is None else f'{peak / 2**20:8.1f} MiB'}"
                     f"  weights {r['weight_bytes'] / 2**20:7.2f} MiB  top1 vs fp16 {r.get('top1_agreement_vs_fp16', '-')}")
        else:
            line += " " + r.get("reason", r.get("error", ""))[:160]
        print(line)
    print(f"gpu_check: results in {args.out}")
    return 0 if all(r["status"] == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
