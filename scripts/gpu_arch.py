"""gpu_check.py --arch: a real architecture with random weights, a time budget, and the checks.

The model is built from `selector/conf/arch/<name>.json` (or any config.json path) straight on the device
with random weights, saved as safetensors so the quantizers read it like any checkpoint, and
measured like the tiny one. Nothing is downloaded; the tokenizer is the small one tests/tiny.py
trains (its ids are a subset of any real vocabulary, and nothing here needs real text).

Each step is skipped when its rough cost no longer fits the budget, and a timer stops the run at
the budget's end whatever it is doing: the JSON then says what ran, what was skipped and why.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

ARCH_PRECISIONS = ("bf16", "awq-int4", "gptq-int4", "int8")  # in order of need: the checks compare to bf16
INT4_RATIO_MAX = 0.35
WITHIN = 0.03  # weights and peak against `python -m selector plan`
BANDWIDTH_FACTOR = 3.0
NA_CPU = "not applicable on cpu"


class Deadline(BaseException):
    """The budget ran out (a BaseException, so libraries' `except Exception` do not swallow it)."""


class Budget:
    """Seconds left of the run's budget, and a timer that raises Deadline when none are."""

    def __init__(self, total_s: float) -> None:
        self.total_s, self.t0 = total_s, time.monotonic()
        self.steps: list[dict[str, Any]] = []

    def left(self) -> float:
        return self.total_s - (time.monotonic() - self.t0)

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def arm(self) -> None:
        def stop(signum: int, frame: Any) -> None:
            raise Deadline(f"the {self.total_s:g} s budget ran out")

        signal.signal(signal.SIGALRM, stop)
        signal.setitimer(signal.ITIMER_REAL, max(0.1, self.left()))

    def disarm(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)

    def fits(self, need_s: float) -> bool:
        return need_s <= self.left()

    def record(self, step: str, seconds: float) -> None:
        self.steps.append({"step": step, "seconds": round(seconds, 2)})


def estimate_s(step: str, params_b: float, cuda: bool) -> float:
    """Rough seconds a step takes, to skip it up front when it cannot fit (never used as a figure).

    From this project's H200 runs on a random-weight Qwen2.5-7B (7.6 B parameters): llmcompressor
    GPTQ 26 s and AWQ 17 s at 16 x 256 calibration tokens, a first compiled decode 42-65 s; load and
    save at a few GB/s; gptqmodel's quantize-and-pack not measured yet, so counted generously.
    """
    p = params_b
    table = {
        "build": 3 + 3 * p,
        "load:native": 2 + 1 * p,
        "load:bnb": 3 + 3 * p,
        "load:torchao": 3 + 3 * p,
        "load:llmcompressor": 10 + 5 * p,
        "load:gptqmodel": 20 + 15 * p,
        "compile": (65 if p >= 1 else 30) if cuda else 30,
        "measure": 5 + 0.5 * p,
    }
    return table[step]


def arch_path(name: str) -> Path:
    """`selector/conf/arch/<name>.json`, or `name` itself when it is a path to a config.json."""
    path = Path(name)
    if path.suffix == ".json" and path.is_file():
        return path.resolve()
    from selector.paths import CONF_DIR

    path = CONF_DIR / "arch" / f"{name}.json"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in (CONF_DIR / "arch").glob("*.json")))
        raise SystemExit(f"gpu_check: no architecture {name!r} (selector/conf/arch has: {known}; "
                         "or pass a config.json path)")
    return path


def build_random(torch: Any, arch_json: Path, out: Path, device: str, dtype: str = "bfloat16") -> tuple[Path, int]:
    """The architecture with random weights, built on `device` and saved (safetensors) to `out`."""
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    from tests.tiny import build_tokenizer

    cfg = json.loads(arch_json.read_text())
    vocab = int(cfg["vocab_size"])
    if vocab < 300:
        raise SystemExit(f"gpu_check: {arch_json.name}: vocab_size {vocab} is below the tokenizer's ~260 base tokens")
    tok = build_tokenizer(out, vocab_size=min(512, vocab))
    # Special tokens are the tokenizer's: a real vocabulary's ids mean nothing to it.
    cfg.update(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    config = AutoConfig.for_model(**cfg)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                                               bos_token_id=tok.bos_token_id)
    params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(out, safe_serialization=True)
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return out, params


def plan_figures(arch_json: Path, precision: Any, cache_dir: Path, device: str, batch: int, context: int) -> Any:
    """`python -m selector plan`'s row for this variant (weights, KV cache, activations; no reserve:
    torch.cuda.max_memory_allocated does not see the CUDA context)."""
    from selector.config import ModelConfig, SelectorConfig, SourceConfig
    from selector.engines.inprocess.engine import HfEngineConfig
    from selector.plan.estimate import plan_row

    model = ModelConfig(name=arch_json.stem, arch_config=str(arch_json), source=SourceConfig(kind="local"))
    cfg = SelectorConfig(model=model, precision=precision, cache_dir=str(cache_dir), engine=HfEngineConfig())
    return plan_row(cfg, batch=batch, context=context, gpu_gib=None, device="cuda" if device.startswith("cuda") else "cpu")


# ---- the checks ------------------------------------------------------------------------------


def check(name: str, status: str, **detail: Any) -> dict[str, Any]:
    return {"check": name, "status": status, **detail}


def within(measured: float, expected: float, tolerance: float = WITHIN) -> tuple[str, float]:
    error = (measured - expected) / expected
    return ("pass" if abs(error) <= tolerance else "fail"), round(100 * error, 2)


def arch_checks(results: list[dict[str, Any]], configs: dict[str, Any], arch_json: Path, cache_dir: Path,
                device: str, bandwidth: float | None) -> list[dict[str, Any]]:
    """Every check, per precision where it applies: pass, fail, not run (why), or not applicable on cpu."""
    cuda = device.startswith("cuda")
    ok = {r["precision"]: r for r in results if r["status"] == "ok"}
    out = []
    for r in results:
        name = r["precision"]
        if name not in ok:
            out.append(check("weights_vs_plan", f"not run ({r['status']})", precision=name))
            continue
        plan = plan_figures(arch_json, configs[name], cache_dir, device, r["shape"]["batch"],
                            r["shape"]["context"])
        status, err = within(r["weight_bytes"], plan.weight_bytes)
        out.append(check("weights_vs_plan", status, precision=name, measured=r["weight_bytes"],
                         expected=plan.weight_bytes, error_pct=err, limit="within 3%", layout=plan.layout))
        if not cuda:
            out.append(check("peak_vs_plan", NA_CPU, precision=name))
            continue
        status, err = within(r["cuda_peak_serving_bytes"], plan.total_bytes)
        out.append(check("peak_vs_plan", status, precision=name, measured=r["cuda_peak_serving_bytes"],
                         expected=plan.total_bytes, error_pct=err, limit="within 3%",
                         at=f"batch {r['shape']['batch']} x context {r['shape']['context']}"))

    bf16 = ok.get("bf16")
    int4 = [r for r in results if configs[r["precision"]].bits == 4 and configs[r["precision"]].backend != "bnb"]
    for r in int4:
        name = r["precision"]
        if not cuda:
            out += [check("int4_weights_vs_bf16", NA_CPU, precision=name),
                    check("int4_batch1_not_slower_than_bf16", NA_CPU, precision=name)]
            continue
        if name not in ok or bf16 is None:
            why = f"not run ({r['status'] if name not in ok else 'bf16 did not run'})"
            out += [check("int4_weights_vs_bf16", why, precision=name),
                    check("int4_batch1_not_slower_than_bf16", why, precision=name)]
            continue
        q = ok[name]
        ratio = q["weight_bytes"] / bf16["weight_bytes"]
        planned = (plan_figures(arch_json, configs[name], cache_dir, device, 1, 1).weight_bytes
                   / plan_figures(arch_json, configs["bf16"], cache_dir, device, 1, 1).weight_bytes)
        out.append(check("int4_weights_vs_bf16", "pass" if ratio <= INT4_RATIO_MAX else "fail", precision=name,
                         ratio=round(ratio, 4), limit=f"<= {INT4_RATIO_MAX}", planned_ratio=round(planned, 4),
                         note="embeddings and lm_head stay 16-bit: the plan's ratio is the best a packed load reaches",
                         first_linear=q["first_linear"]))
        tq, tb = q["latency"]["tpot_ms"]["p50"], bf16["latency"]["tpot_ms"]["p50"]
        out.append(check("int4_batch1_not_slower_than_bf16", "pass" if tq <= tb else "fail", precision=name,
                         int4_tpot_ms=round(tq, 3), bf16_tpot_ms=round(tb, 3),
                         int4_fast_path=q["fast_path"]["active"], bf16_fast_path=bf16["fast_path"]["active"],
                         first_linear=q["first_linear"]))

    if not cuda:
        out.append(check("bf16_decode_vs_bandwidth", NA_CPU))
    elif bf16 is None or bandwidth is None:
        out.append(check("bf16_decode_vs_bandwidth", "not run (bf16 did not run)"))
    else:
        floor_ms = bf16["weight_bytes"] / bandwidth * 1e3
        tpot = bf16["latency"]["tpot_ms"]["p50"]
        fast = bf16["fast_path"]["active"]
        status = "pass" if fast and tpot <= BANDWIDTH_FACTOR * floor_ms else "fail"
        out.append(check("bf16_decode_vs_bandwidth", status, tpot_ms=round(tpot, 3),
                         bandwidth_floor_ms=round(floor_ms, 3), ratio=round(tpot / floor_ms, 2),
                         limit=f"<= {BANDWIDTH_FACTOR:g}x the floor, on the fast path", fast_path=bf16["fast_path"]))
    return out
