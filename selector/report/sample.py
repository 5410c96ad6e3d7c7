"""A synthetic but realistic sweep (RunRecords + Selection + context) for previewing the report.

Nothing here is measured: the numbers are shaped like a CPU sweep of the offline model ladder
(3 sizes x 4 precisions, one failed, one skipped) so the templates can be designed and tested
without running models. Item scores are drawn from a seeded RNG; every derived figure (CIs, paired
differences, McNemar p, Pareto fronts) is computed from them, not typed in.

    python -m selector.report.sample OUT_DIR    # renders the sample report into OUT_DIR
"""

from __future__ import annotations

import hashlib
import math
import random
import sys
from pathlib import Path
from typing import Any

from scipy.stats import binomtest

from selector.selection import pareto_front
from selector.stats import wilson_interval
from selector.types import (
    Check, ErrorInfo, FidelityResult, LatencyResult, LoadLevel, MemoryResult, PairedDiff,
    Percentiles, PerfResult, QuantInfo, RunRecord, SampleRecord, Selection, TaskResult, ThroughputPoint,
    Variant, Verdict,
)

TASKS = ("sentiment", "extraction", "arithmetic")
FLOORS = {"sentiment": 0.80, "extraction": 0.70, "arithmetic": 0.60}
ITEMS_PER_TASK = 40
# model -> (params, bf16 accuracy per task, ms per output token at bf16 on 2 CPU cores)
MODELS: dict[str, tuple[int, dict[str, float], float]] = {
    "smollm2-135m": (134_515_008, {"sentiment": 0.95, "extraction": 0.55, "arithmetic": 0.05}, 9.5),
    "gemma3-270m": (268_098_176, {"sentiment": 0.90, "extraction": 0.72, "arithmetic": 0.15}, 10.6),
    "qwen2.5-coder-1.5b": (1_777_088_000, {"sentiment": 1.0, "extraction": 0.95, "arithmetic": 0.92}, 52.0),
}
# precision -> (bytes per param, flip rate vs bf16, latency factor on CPU, library, KL)
PRECISIONS: dict[str, tuple[float, float, float, str, float]] = {
    "bf16": (2.0, 0.0, 1.0, "torch", 0.0),
    "int8": (1.25, 0.02, 2.0, "bitsandbytes", 0.0021),
    "gptq-w4": (0.72, 0.05, 1.7, "gptqmodel", 0.031),
    "awq-w4": (0.72, 0.06, 1.1, "llmcompressor", 0.042),
    "fp8": (1.0, 0.03, 1.0, "torchao", 0.004),
}
GRID = {
    "smollm2-135m": ("bf16", "int8", "gptq-w4", "awq-w4"),
    "gemma3-270m": ("bf16", "int8", "gptq-w4", "fp8"),
    "qwen2.5-coder-1.5b": ("bf16", "int8", "gptq-w4", "awq-w4"),
}
SKIPPED = "gemma3-270m/fp8"
FAILED = "qwen2.5-coder-1.5b/awq-w4"
ENVIRONMENT = {
    "hardware": "2 vCPU (Intel Xeon, AVX512-BF16), 24 GiB RAM, no GPU", "device": "cpu",
    "python": "3.11.2", "torch": "2.13.0", "transformers": "5.17.0", "mlflow": "3.17.2",
    "git_commit": "02c33e6", "threads": 2,
    "code_sandbox": ["rlimits", "process-group", "scrubbed-env", "unprivileged-user", "no-network", "pid-namespace",
                     "read-only-fs"],
}


def _hex(*parts: str, length: int = 32) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:length]


def _pct(p50: float, spread: float, n: int) -> Percentiles:
    return Percentiles(p50=p50, p90=p50 * (1 + spread), p95=p50 * (1 + 1.4 * spread),
                       p99=p50 * (1 + 2.2 * spread), mean=p50 * (1 + spread / 4), n=n)


def _scores(model: str, precision: str, task: str) -> dict[str, float]:
    """Baseline item scores per model; a quantized variant flips a few items (mostly to wrong)."""
    base = random.Random(_hex(model, task))
    acc = MODELS[model][1][task]
    flip = PRECISIONS[precision][1]
    flips = random.Random(_hex(model, precision, task))
    scores = {}
    for i in range(ITEMS_PER_TASK):
        right = base.random() < acc
        if flips.random() < flip:
            right = not right if right or flips.random() < 0.3 else right
        scores[f"{task}-{i:03d}"] = 1.0 if right else 0.0
    return scores


def _task(model: str, precision: str, task: str) -> TaskResult:
    scores = _scores(model, precision, task)
    hits = sum(scores.values())
    low, high = wilson_interval(hits, len(scores))
    return TaskResult(task=task, metric="exact_match", value=hits / len(scores), ci_low=low,
                      ci_high=high, n=len(scores), item_scores=scores)


def _perf(params: int, tpot: float, factor: float, with_load: bool) -> PerfResult:
    ttft = 0.06 * params / 1e6 * factor + 20
    tpot *= factor
    e2e = ttft + 31 * tpot
    latency = LatencyResult(ttft_ms=_pct(ttft, 0.15, 10), tpot_ms=_pct(tpot, 0.08, 310),
                            e2e_ms=_pct(e2e, 0.1, 10), prompt_tokens=64, output_tokens=32, repeats=10)
    throughput = [ThroughputPoint(batch_size=b, output_tokens_per_s=b * 1000 / tpot / (1 + 0.12 * b),
                                  requests_per_s=b * 1000 / e2e / (1 + 0.12 * b), wall_s=e2e * 2 / 1000)
                  for b in (1, 8)]
    load = []
    for c in (1, 2, 4, 8) if with_load else ():
        slow = 1 + 0.35 * (c - 1)
        load.append(LoadLevel(concurrency=c, requests=32, errors=0, duration_s=32 * e2e * slow / c / 1000,
                              request_throughput=c * 1000 / (e2e * slow),
                              output_tokens_per_s=c * 32_000 / (e2e * slow),
                              ttft_ms=_pct(ttft * (1 + 0.5 * (c - 1)), 0.2, 32),
                              e2e_ms=_pct(e2e * slow, 0.15, 32), cpu_util_pct=min(100.0, 55.0 * c)))
    return PerfResult(device="cpu", latency=latency, throughput=throughput, load=load)


def _record(model: str, precision: str, inject: str) -> RunRecord:
    params, _, tpot = MODELS[model]
    per_param, _, factor, library, kl = PRECISIONS[precision]
    variant = Variant(model=model, precision=precision, family="offline-ladder", params=params)
    gguf = "Q4_K_M" if model != "smollm2-135m" else "Q4_1"
    common: dict[str, Any] = dict(
        key=_hex(model, precision, length=16), variant=variant, environment=ENVIRONMENT,
        config={"model": {"name": model, "notes": f"float weights are dequantized from a {gguf} GGUF"},
                "precision": {"name": precision, "backend": library}},
        mlflow_run_id=_hex("run", model, precision), started_at="2025-11-30T04:10:00Z",
        finished_at="2025-11-30T04:14:31Z")
    name = variant.name
    if name == SKIPPED:
        return RunRecord(status="skipped", reason="fp8 needs a CUDA device with compute capability >= 8.9",
                         **common)
    if name == FAILED:
        message = "Cannot access accelerator device when none is available." + inject
        tail = ("Quantizing layers: 6/28\n  File \"llmcompressor/pipelines/cache.py\", line 94\n"
                f"    tensor.pin_memory()\nRuntimeError: {message}")
        return RunRecord(status="failed", reason=f"quantize: RuntimeError: {message}",
                         error=ErrorInfo(type="RuntimeError", message=message, stage="quantize", log_tail=tail),
                         timings_s={"load": 21.4, "quantize": 488.0}, **common)
    weight = int(params * per_param)
    artifact = weight + 2_000_000
    quant = None
    if precision != "bf16":
        quant = QuantInfo(method=precision.split("-")[0], library=library, library_version="0.0",
                          params={"bits": 8 if precision == "int8" else 4, "group_size": 64},
                          quantize_s=None if precision == "int8" else params / 1e6 * 0.55 + 30,
                          artifact_bytes=None if precision == "int8" else artifact)
    fidelity = None
    if precision != "bf16":
        fidelity = FidelityResult(baseline=f"{model}/bf16", mean_kl=kl * (1 + params / 4e9),
                                  top1_agreement=1 - 0.9 * kl - 0.004, positions=4096)
    return RunRecord(
        status="completed", tasks={t: _task(model, precision, t) for t in TASKS},
        perf=_perf(params, tpot, factor, with_load=precision in ("bf16", "int8")),
        memory=MemoryResult(weight_bytes=weight, peak_rss_bytes=int(weight * 1.35 + 480e6),
                            artifact_bytes=artifact),
        quant=quant, fidelity=fidelity,
        timings_s={"load": 4.0 + params / 1e8, "evaluate": params / 1e7 * factor, "measure": 60.0}, **common)


def _paired(variant: RunRecord, reference: RunRecord, task: str) -> PairedDiff:
    a, b = reference.tasks[task].item_scores, variant.tasks[task].item_scores
    ids = sorted(set(a) & set(b))
    to_wrong = sum(1 for i in ids if a[i] > b[i])
    to_right = sum(1 for i in ids if b[i] > a[i])
    n = len(ids)
    diff = (to_right - to_wrong) / n
    # Wald interval of a paired difference of proportions
    half = 1.96 * math.sqrt(max(to_right + to_wrong - n * diff * diff, 0.0)) / n
    p = binomtest(to_wrong, to_wrong + to_right).pvalue if to_wrong + to_right else 1.0
    return PairedDiff(task=task, diff=diff, ci_low=max(-1.0, diff - half), ci_high=min(1.0, diff + half), n=n,
                      flips_to_wrong=to_wrong, flips_to_right=to_right, mcnemar_p=p)


def _verdict(record: RunRecord, reference: RunRecord) -> Verdict:
    if record.status != "completed":
        return Verdict(variant=record.name, status=record.status, reasons=[record.reason])
    checks = []
    for task, floor in FLOORS.items():
        got = record.tasks[task].value
        short = f"{got * 100:.1f}% < floor {floor * 100:.0f}% ({(floor - got) * 100:.1f} points short)"
        checks.append(Check(name=f"accuracy:{task}", value=got, limit=floor, passed=got >= floor,
                            detail="" if got >= floor else short))
    paired = {t: _paired(record, reference, t) for t in TASKS} if record is not reference else {}
    assert record.memory is not None
    return Verdict(variant=record.name, status="eligible" if all(c.passed for c in checks) else "rejected",
                   reasons=[f"{c.name.split(':')[1]}: {c.detail}" for c in checks if not c.passed],
                   checks=checks, objective=record.memory.weight_bytes / 1e9, paired=paired)


def _selection(records: list[RunRecord], inject: str) -> Selection:
    done = {r.name: r for r in records if r.status == "completed"}
    reference = done["qwen2.5-coder-1.5b/bf16"]
    verdicts = [_verdict(r, reference) for r in records]
    eligible = sorted((v for v in verdicts if v.status == "eligible"), key=lambda v: v.objective or 0)
    for rank, v in enumerate(eligible, 1):
        v.rank = rank
        v.reasons = [] if rank == 1 else [f"eligible, but {v.objective:.2f} GB of weights (rank {rank})"]
    winner = eligible[0]
    winner.status = "winner"
    w, ref_mem = done[winner.variant], reference.memory.weight_bytes  # type: ignore[union-attr]
    arith = w.tasks["arithmetic"]
    summary = (f"Use {winner.variant}: the smallest variant meeting every accuracy floor, with "
               f"{w.memory.weight_bytes / 1e9:.2f} GB of weights ({w.memory.weight_bytes / ref_mem:.0%} of "  # type: ignore[union-attr]
               f"the bf16 reference) and arithmetic at {arith.value:.1%} [{arith.ci_low:.1%}–{arith.ci_high:.1%}]"
               f" against a 60% floor.")
    mean = {n: sum(t.value for t in r.tasks.values()) / len(r.tasks) for n, r in done.items()}
    weight = {n: r.memory.weight_bytes for n, r in done.items()}  # type: ignore[union-attr]
    e2e = {n: r.perf.latency.e2e_ms.p50 for n, r in done.items()}  # type: ignore[union-attr]
    return Selection(
        policy={"rule": "point", "floors": FLOORS, "objective": "weight_memory", "confidence": 0.95},
        winner=winner.variant, reference=reference.name, summary=summary, verdicts=verdicts,
        pareto={"weight_memory": pareto_front({n: (mean[n], weight[n]) for n in done}),
                "latency": pareto_front({n: (mean[n], e2e[n]) for n in done})},
        sensitivity=[
            {"change": "all floors −5 pp", "winner": winner.variant, "eligible": len(eligible)},
            {"change": "arithmetic floor 10%", "winner": "gemma3-270m/gptq-w4", "eligible": 5},
            {"change": "rule lower_bound", "winner": "qwen2.5-coder-1.5b/int8", "eligible": 2},
        ],
        sample_size=[{"task": t, "n": ITEMS_PER_TASK, "ci_half_width_pp": 15.5,
                      "n_for_5pp_half_width": 385} for t in TASKS],
        noise_floor={"sentiment": 0.0, "extraction": 0.025, "arithmetic": 0.025},
        warnings=["Every task has 40 items: a 95% interval is about ±15 points wide, so differences under "
                  "10 points between variants are not resolved." + inject],
    )


def sample_sweep(inject: str = "") -> tuple[list[RunRecord], Selection, dict[str, Any]]:
    """The sample sweep; `inject` is appended to the failed variant's error and to a warning."""
    records = [_record(m, p, inject) for m, precisions in GRID.items() for p in precisions]
    selection = _selection(records, inject)
    context = {
        "experiment": "selector-sample", "tracking_uri": "sqlite:///outputs/mlflow.db",
        "parent_run_id": _hex("parent"), "sweep_dir": "outputs/sweeps/2025-11-30_04-10-00",
        "config": {"experiment": "selector-sample", "device": "auto", "seed": 0,
                   "policy": selection.policy, "evalset": {"name": "default", "path": "evalsets/default"},
                   "hydra_overrides": ["model=smollm2-135m,gemma3-270m,qwen2.5-coder-1.5b",
                                       "precision=bf16,int8,gptq-w4,awq-w4"]},
        "environment": ENVIRONMENT, "wall_time_s": 3724.0, "created_at": "2025-11-30T05:12:04Z",
    }
    return records, selection, context


def sample_outputs(records: list[RunRecord], inject: str = "") -> dict[str, list[SampleRecord]]:
    """Per-item outputs matching each record's item scores (a wrong answer carries `inject`)."""
    out: dict[str, list[SampleRecord]] = {}
    for r in records:
        out[r.name] = [
            SampleRecord(task=t, id=item, prompt=f"Question {item} of the {t} task.\nAnswer:",
                         output=f"gold-{item}" if score >= 1 else f"wrong answer{inject}", target=f"gold-{item}",
                         score=score)
            for t, result in r.tasks.items() for item, score in result.item_scores.items()
        ]
    return out


if __name__ == "__main__":
    from selector.report.render import write_report

    out = Path(sys.argv[1] if len(sys.argv) > 1 else "report-sample")
    records, selection, context = sample_sweep()
    for kind, path in write_report(records, selection, context, out, sample_outputs(records)).items():
        print(f"{kind}: {path}")
