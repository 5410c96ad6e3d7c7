"""Metric, param and tag names for a RunRecord: one place, so every run compares cleanly in the UI.

Metrics are grouped by a prefix and a slash (accuracy/<task>, latency/ttft_ms_p50, memory/weight_gb,
...). Load-test figures use the concurrency level as the MLflow step of `load/<metric>`, the
answers under load among them (load/answers_changed, load/accuracy/<task>, ...: answer_metrics).
"""

from __future__ import annotations

from typing import Any

from selector.measure.diagnosis import shares
from selector.records import RunRecord, setting_label
from selector.records_answers import answer_metrics

GB = 2**30


def record_params(record: RunRecord) -> dict[str, str]:
    cfg = record.config
    model, prec = cfg.get("model", {}), cfg.get("precision", {})
    params = {
        "model": record.variant.model,
        "precision": record.variant.precision,
        "family": record.variant.family,
        "size_b": f"{record.variant.params / 1e9:.4g}" if record.variant.params else str(model.get("params_b", "")),
        "backend": str(prec.get("backend", "")),
        "dtype": str(prec.get("dtype", "")),
        "bits": str(prec.get("bits", "")),
        "method": str(prec.get("method", "")),
        "source": str(model.get("source", {}).get("kind", "")),
        "evalset": str(cfg.get("evalset", {}).get("name", "")),
        "evalset_hash": str(cfg.get("evalset_hash", "")),
        "engine": str(cfg.get("engine", {}).get("kind", "")),
        "batch_size": str(cfg.get("engine", {}).get("batch_size", "")),
        "engine_compile": str(cfg.get("engine", {}).get("compile", "")),
        "compiled": str(record.perf.compiled if record.perf and record.perf.compiled is not None else ""),
        "device": str(record.environment.get("device", "")),
        "torch_threads": str(record.environment.get("torch_threads", "")),
        "code_sandbox": ", ".join(record.environment.get("code_sandbox", [])),
        "variant_key": record.key,
        # built (prepared in this run) | cache (all it loaded was cached) | none (never prepared or loaded)
        "preparation": record.prepared,
        # serving knobs, swept or not, so runs of one model x precision compare by setting in the UI
        "setting": setting_label(record.variant.setting),
        "serving.max_batch_size": str(cfg.get("measure", {}).get("load", {}).get("max_batch_size", "")),
        "serving.max_queue_delay_ms": str(cfg.get("measure", {}).get("load", {}).get("max_queue_delay_ms", "")),
    }
    if record.quant:
        for k, v in record.quant.params.items():
            if isinstance(v, (str, int, float, bool)) or v is None:
                params[f"quant.{k}"] = str(v)
        params["quant.library"] = f"{record.quant.library}=={record.quant.library_version}"
        # quant/time_s is what quantizing took: in this run, or (cached) in the earlier one that made the artifact
        params["quant.cached"] = str(record.quant_from_cache)
    params.update(kernel_params(record))
    for lib, ver in record.environment.get("versions", {}).items():
        params[f"version.{lib}"] = str(ver)
    return {k: v[:6000] for k, v in params.items()}


def kernel_params(record: RunRecord) -> dict[str, str]:
    """Which kernel ran the linear layers (kernel.*): a broken or unpacked kernel can pass for accuracy loss."""
    k = record.kernel
    if k is None:
        return {}
    return {
        "kernel": k.kernel,
        "kernel.requested": k.requested,
        "kernel.linear_class": k.linear_class,
        "kernel.weight_class": k.weight_class,
        "kernel.library_kernel": k.library_kernel,
        "kernel.quantized_layers": str(k.quantized_layers),
        "kernel.plain_layers": str(k.plain_layers),
        "kernel.unpacked": str(k.unpacked),
        "kernel.dtype": k.dtype,
        "kernel.fallbacks": "; ".join(k.fallbacks),
    }


def record_metrics(record: RunRecord) -> dict[str, float]:
    m: dict[str, float] = {}
    for name, t in record.tasks.items():
        m[f"accuracy/{name}"] = t.value
        m[f"accuracy/{name}/ci_low"] = t.ci_low
        m[f"accuracy/{name}/ci_high"] = t.ci_high
        m[f"n/{name}"] = t.n
    if record.tasks:
        m["accuracy/mean"] = sum(t.value for t in record.tasks.values()) / len(record.tasks)
    if record.search:
        m["search/items_evaluated"] = record.search.items_evaluated
        m["search/items_total"] = record.search.items_total
        m["search/items_reused"] = record.search.items_reused
    perf = record.perf
    if perf and perf.latency:
        for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):
            p = getattr(perf.latency, metric)
            for q in ("p50", "p95", "p99"):
                m[f"latency/{metric}_{q}"] = getattr(p, q)
    if perf:
        for point in perf.throughput:
            m[f"throughput/bs{point.batch_size}_tokens_per_s"] = point.output_tokens_per_s
        if perf.compile_s:  # the fast path's compiling, apart from every latency figure
            m["time/compile_s"] = perf.compile_s
    for base, capacity in (("capacity", perf.capacity if perf else None),
                           ("capacity_concurrency", perf.capacity_concurrency if perf else None)):
        if capacity is None:
            continue
        m[f"{base}/probes"] = len(capacity.steps)
        m[f"{base}/search_s"] = capacity.wall_s
        m[f"{base}/runs"] = len(capacity.runs)
        m[f"{base}/straddles"] = len(capacity.straddles)  # levels where runs disagreed about the SLO
        m[f"{base}/saturated_probes"] = sum(1 for s in capacity.steps if s.stopped)
        for metric, name in (("rps", "capacity_rps"), ("failed_rps", "failed_rps"), ("low", "low"), ("high", "high"),
                             ("low_rps", "low_rps"), ("concurrency", "capacity_concurrency"),
                             ("output_tokens_per_s", "output_tokens_per_s"), ("cpu_util_pct", "cpu_util_pct"),
                             ("gpu_util_pct", "gpu_util_pct"), ("input_tokens_per_request", "input_tokens_per_request"),
                             ("output_tokens_per_request", "output_tokens_per_request")):
            value = getattr(capacity, name)
            if value is not None:
                m[f"{base}/{metric}"] = value
        m.update(confirmation_metrics(base, capacity))
    if record.memory:
        mem = record.memory
        m["memory/weight_gb"] = mem.weight_bytes / GB
        for field in ("peak_rss_bytes", "cuda_max_allocated_bytes", "cuda_max_reserved_bytes", "artifact_bytes",
                      "runtime_rss_bytes", "planned_serving_bytes"):
            value = getattr(mem, field)
            if value is not None:
                m[f"memory/{field.replace('_bytes', '')}_gb"] = value / GB
        for phase in ("serving", "load", "prepare"):  # memory/serving/rss_gb, memory/load/cuda_reserved_gb, ...
            peak = getattr(mem, phase)
            for field, value in (peak.model_dump() if peak else {}).items():
                if value is not None:
                    m[f"memory/{phase}/{field.replace('_bytes', '')}_gb"] = value / GB
    if record.fidelity:
        m["fidelity/mean_kl"] = record.fidelity.mean_kl
        m["fidelity/top1_agreement"] = record.fidelity.top1_agreement
        # positions where a server named none of the baseline's top tokens: the KL there is only bounded
        m["fidelity/disjoint_positions"] = float(record.fidelity.disjoint)
    if record.quant and record.quant.quantize_s is not None:
        m["quant/time_s"] = record.quant.quantize_s
    for stage, seconds in record.timings_s.items():
        m[f"time/{stage}_s"] = seconds
    return m


def confirmation_metrics(base: str, capacity: Any) -> dict[str, float]:
    """The confirmation run at the planned rate (CapacityResult.confirmation), when the search has one:
    capacity/confirm_held (1: every limit held), confirm_rps (the rate run), confirm_s (its judged
    window), confirm_<slo key> and confirm_<slo key>_rise (ms; absent: it fell on a failed request),
    confirm_margin, confirm_served_rps, confirm_errors, confirm_judged_requests."""
    t = capacity.confirmation
    if t is None:
        return {}
    m = {f"{base}/confirm_held": float(t.held), f"{base}/confirm_rps": t.rate_rps, f"{base}/confirm_s": t.window_s,
         f"{base}/confirm_warmup_s": t.warmup_s, f"{base}/confirm_served_rps": t.level.request_throughput,
         f"{base}/confirm_errors": float(t.level.errors), f"{base}/confirm_judged_requests": float(t.judged_requests)}
    if t.margin is not None:
        m[f"{base}/confirm_margin"] = t.margin
    for key, check in t.checks.items():  # capacity/confirm_e2e_ms_p95, capacity/confirm_e2e_ms_p95_rise
        for field, suffix in (("estimate", ""), ("rise", "_rise")):
            if check.get(field) is not None:
                m[f"{base}/confirm_{key}{suffix}"] = check[field]
    if t.level.answers is not None:  # capacity/confirm_answers_changed, capacity/confirm_accuracy/<task>, ...
        m.update(answer_metrics(base, t.level.answers, prefix="confirm_"))
    return m


def load_metrics(record: RunRecord) -> list[tuple[str, float, int]]:
    """(name, value, step=concurrency) for each load level (rate-based levels use step=0)."""
    out: list[tuple[str, float, int]] = []
    for level in record.perf.load if record.perf else []:
        step = level.concurrency or 0
        if level.concurrency is not None:
            base = "load"
        elif level.replay_scale is not None:  # a request file's recorded arrival times
            base = f"load_recorded{level.replay_scale:g}"
        else:
            base = f"load_rate{level.rate_rps:g}"
        out += [(f"{base}/request_throughput", level.request_throughput, step),
                (f"{base}/output_tokens_per_s", level.output_tokens_per_s, step),
                (f"{base}/error_rate", level.errors / max(1, level.requests), step)]
        for name in ("goodput_rps", "cpu_util_pct", "harness_cpu_pct", "gpu_util_pct", "prefix_cache_hit_rate"):
            if getattr(level, name) is not None:
                out.append((f"{base}/{name}", getattr(level, name), step))
        if level.gpu_mem_bytes is not None:
            out.append((f"{base}/gpu_mem_gb", level.gpu_mem_bytes / GB, step))
        for metric in ("ttft_ms", "itl_ms", "e2e_ms", "queue_ms", "batch_wait_ms", "compute_ms"):
            p: Any = getattr(level, metric)
            if p is not None:
                out += [(f"{base}/{metric}_{q}", getattr(p, q), step) for q in ("p50", "p90", "p95", "p99")]
        split, _ = shares(level)  # where the time went, as the report's diagnosis reads it
        out += [(f"{base}/{layer}_share", share, step) for layer, share in split.items()]
        if level.answers is not None:  # the eval items' answers at this level against those at rest
            out += [(name, value, step) for name, value in answer_metrics(base, level.answers).items()]
    for base, capacity in (("capacity_probe", record.perf.capacity if record.perf else None),
                           ("capacity_concurrency_probe", record.perf.capacity_concurrency if record.perf else None)):
        for i, probe in enumerate(capacity.steps if capacity else []):  # the search's probes, in order: step i
            level = ("rate_rps", probe.rate_rps) if probe.rate_rps is not None else ("concurrency", probe.concurrency)
            out += [(f"{base}/{level[0]}", float(level[1] or 0), i), (f"{base}/run", float(probe.repeat), i),
                    (f"{base}/passed", float(probe.passed), i), (f"{base}/saturated", float(bool(probe.stopped)), i),
                    (f"{base}/request_throughput", probe.level.request_throughput, i)]
            for metric in ("ttft_ms", "itl_ms", "e2e_ms"):
                p = getattr(probe.level, metric)
                if p is not None:
                    out.append((f"{base}/{metric}_p95", p.p95, i))
            if probe.level.prefix_cache_hit_rate is not None:
                out.append((f"{base}/prefix_cache_hit_rate", probe.level.prefix_cache_hit_rate, i))
            if probe.level.answers is not None:
                out += [(name, value, i) for name, value in answer_metrics(base, probe.level.answers).items()]
    return out


def record_tags(record: RunRecord) -> dict[str, str]:
    return {
        "selector.model": record.variant.model,
        "selector.precision": record.variant.precision,
        "selector.size": f"{record.variant.params / 1e9:.3g}B" if record.variant.params else "",
        "selector.status": record.status,
        "selector.variant_key": record.key,
        **({"selector.setting": setting_label(record.variant.setting)} if record.variant.setting else {}),
        **({"selector.reason": record.reason[:5000]} if record.reason else {}),
        **({"selector.failed_stage": record.error.stage} if record.error else {}),
        # stopped early by adaptive search: the floor that was out of reach, not a failure
        **({"selector.search": record.search.strategy} if record.search else {}),
        **({"selector.stopped_by": record.search.stopped_by[:5000]} if record.search and record.search.stopped_by else {}),
        **confirmation_tags(record),
    }


def confirmation_tags(record: RunRecord) -> dict[str, str]:
    """selector.plan_confirmed: held | did not hold, for the capacity a plan stands on (the rate
    search's, else the concurrency search's), and why not (its note, log tail and all)."""
    from selector.selection.cost import planning_capacity

    capacity = planning_capacity(record)
    t = capacity.confirmation if capacity is not None else None
    if t is None:
        return {}
    tags = {"selector.plan_confirmed": "held" if t.held else "did not hold"}
    if not t.held and t.note:
        tags["selector.plan_confirm_note"] = t.note[:5000]
    return tags


def flip_metrics(verdict: Any) -> dict[str, float]:
    """Answers this variant got differently from its own model's baseline precision, both ways."""
    diffs = verdict.baseline_paired.values()
    n = sum(d.n for d in diffs)
    if not n:
        return {}
    to_wrong, to_right = sum(d.flips_to_wrong for d in diffs), sum(d.flips_to_right for d in diffs)
    return {"fidelity/flips_to_wrong": to_wrong, "fidelity/flips_to_right": to_right,
            "fidelity/flip_rate": (to_wrong + to_right) / n}


def settings_tags(selection: Any) -> dict[str, str]:
    """The sweep run's tags for its serving-settings comparison: per model x precision, the best setting."""
    tags = {}
    for choice in selection.settings:
        best = next((r for r in choice.results if r.variant == choice.best), None)
        tags[f"selector.best_setting.{choice.group}"] = setting_label(best.setting) if best else "none"
    return tags
