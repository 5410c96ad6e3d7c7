"""The report's view model: records + selection -> rows of plain-text cells.

HTML, Markdown and the terminal all render these same cells, each escaping text its own way, so
the three never disagree on a number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from selector.report import fmt
from selector.selection.measures import PROCESS_PEAK, serving_peak
from selector.records import RunRecord, TaskResult
from selector.verdicts import Selection, Verdict


@dataclass(frozen=True)
class Cell:
    text: str
    kind: str = ""  # a style hint: "num", "badge winner", "below", "muted"...
    title: str = ""  # extra detail (HTML tooltip)
    sub: str = ""  # a second, smaller line (Markdown: in parentheses)


@dataclass
class Table:
    columns: list[str]
    rows: list[list[Cell]] = field(default_factory=list)
    note: str = ""
    compact: bool = False  # few columns: size to content instead of the page width

    def numeric(self) -> list[bool]:
        """Columns whose every cell is a number (their headers align right, like the numbers)."""
        return [bool(self.rows) and all("num" in row[i].kind for row in self.rows) for i in range(len(self.columns))]


def order_records(records: list[RunRecord]) -> list[RunRecord]:
    """Smallest model first; within a model, the largest weights (the baseline) first."""

    def key(r: RunRecord) -> tuple[float, str, float]:
        weight = r.memory.weight_bytes if r.memory else 0
        return (r.variant.params or math.inf, r.variant.model, -weight)

    return sorted(records, key=key)


def task_names(records: list[RunRecord], selection: Selection) -> list[str]:
    """Tasks named by the policy's floors first (in its order), then the rest alphabetically."""
    seen = {t for r in records for t in r.tasks}
    floors = list((selection.policy.get("floors") or {}).keys())
    return [t for t in floors if t in seen] + sorted(seen - set(floors))


def task_floor(selection: Selection, task: str) -> float | None:
    floors = selection.policy.get("floors") or {}
    floor = floors.get(task, selection.policy.get("default_floor"))
    return float(floor) if isinstance(floor, (int, float)) else None


def mean_accuracy(record: RunRecord, tasks: list[str]) -> float | None:
    """Unweighted mean over tasks (the y axis of the trade-off plots); None if any is missing."""
    values = [record.tasks[t].value for t in tasks if t in record.tasks]
    return sum(values) / len(values) if values and len(values) == len(tasks) else None


def ci_label(selection: Selection) -> str:
    """'95% CI' at the policy's confidence (the intervals are computed at it)."""
    return f"{100 * float(selection.policy.get('confidence') or 0.95):g}% CI"


def verdicts_by_variant(selection: Selection) -> dict[str, Verdict]:
    return {v.variant: v for v in selection.verdicts}


def verdict_status(record: RunRecord, verdict: Verdict | None) -> str:
    return verdict.status if verdict else record.status


def peak_memory(record: RunRecord) -> tuple[int | None, str]:
    """The serving peak policy.max_memory_gb judges, and what it is (selection.measures.serving_peak)."""
    return serving_peak(record)


def best_throughput(record: RunRecord) -> tuple[float, int] | None:
    points = record.perf.throughput if record.perf else []
    if not points:
        return None
    best = max(points, key=lambda p: p.output_tokens_per_s)
    return best.output_tokens_per_s, best.batch_size


def artifact_bytes(record: RunRecord) -> int | None:
    if record.quant and record.quant.artifact_bytes is not None:
        return record.quant.artifact_bytes
    return record.memory.artifact_bytes if record.memory else None


def _task_cell(result: TaskResult | None, verdict: Verdict | None, task: str) -> Cell:
    if result is None:
        return Cell(fmt.DASH, "num muted")
    check = next((c for c in verdict.checks if c.name == f"accuracy:{task}"), None) if verdict else None
    shown = fmt.decided(result, verdict)
    if check is not None and not check.passed:
        return Cell(fmt.accuracy_ci(shown), "num below", check.detail or f"below {check.limit}")
    return Cell(fmt.accuracy_ci(shown), "num", f"n={shown.n}, {shown.metric}, {shown.ci_method} CI")


def _flips_cell(verdict: Verdict | None) -> Cell:
    """Answers this variant got differently from its own model at the baseline precision."""
    if verdict is None or not verdict.baseline_paired:
        return Cell(fmt.DASH, "num muted")
    diffs = verdict.baseline_paired.values()
    n = sum(d.n for d in diffs)
    down, up = sum(d.flips_to_wrong for d in diffs), sum(d.flips_to_right for d in diffs)
    per_task = ", ".join(f"{d.task}: -{d.flips_to_wrong}/+{d.flips_to_right}" for d in diffs)
    return Cell(f"{fmt.pct((down + up) / n)} (-{down} +{up})", "num",
                f"vs {verdict.baseline} on {n} items; right->wrong / wrong->right per task: {per_task}")


def variant_table(records: list[RunRecord], selection: Selection) -> Table:
    tasks = task_names(records, selection)
    verdicts = verdicts_by_variant(selection)
    has_fidelity = any(r.fidelity for r in records)
    has_flips = any(v.baseline_paired for v in selection.verdicts)
    has_quant_time = any(r.quant and r.quant.quantize_s is not None for r in records)
    has_artifact = any(artifact_bytes(r) is not None for r in records)
    has_kernel = any(r.kernel or r.serving for r in records)
    columns = ["variant", "params", "precision", "verdict"]
    for t in tasks:
        floor = task_floor(selection, t)
        columns.append(f"{t} (floor {fmt.pct(floor, 0)})" if floor is not None else t)
    has_phases = any(r.memory and (r.memory.load or r.memory.prepare) for r in records)
    columns += ["weight GB", "serving peak GB", "plan est. GB (measured/plan)"]
    columns += ["load peak GB", "prepare peak GB"] if has_phases else []
    columns += ["TTFT p50 ms", "e2e p50 ms", "e2e p95 ms", "tok/s (batch)"]
    columns += ["KL", "top-1 agree"] if has_fidelity else []
    columns += ["flips vs baseline"] if has_flips else []
    columns += ["quantize time"] if has_quant_time else []
    columns += ["artifact GB"] if has_artifact else []
    columns += ["kernel"] if has_kernel else []
    columns.append("reasons")
    table = Table(columns=columns)
    for r in order_records(records):
        verdict = verdicts.get(r.name)
        status = verdict_status(r, verdict)
        rank = f" #{verdict.rank}" if verdict and verdict.rank and status == "eligible" else ""
        row = [Cell(r.name, "name"), Cell(fmt.params(r.variant.params), "num"), Cell(r.variant.precision),
               Cell(status + rank, f"badge {status}", f"record status: {r.status}")]
        row += [_task_cell(r.tasks.get(t), verdict, t) for t in tasks]
        peak, peak_kind = peak_memory(r)
        lat = r.perf.latency if r.perf else None
        tput = best_throughput(r)
        row += [
            Cell(fmt.gigabytes(r.memory.weight_bytes if r.memory else None), "num"),
            Cell(fmt.gigabytes(peak) + (" *" if peak_kind == PROCESS_PEAK else ""), "num", _peak_title(r, peak_kind)),
            _planned_cell(r, peak),
        ]
        if has_phases:
            mem = r.memory
            row += [Cell(fmt.gigabytes(_phase_bytes(mem.load if mem else None)), "num", "loading the checkpoint"),
                    prepare_cell(r)]
        row += [
            Cell(fmt.millis(lat.ttft_ms.p50 if lat else None), "num"),
            Cell(fmt.millis(lat.e2e_ms.p50 if lat else None), "num"),
            Cell(fmt.millis(lat.e2e_ms.p95 if lat else None), "num"),
            Cell(f"{fmt.sig(tput[0])} (b{tput[1]})" if tput else fmt.DASH, "num"),
        ]
        if has_fidelity:
            row += fidelity_cells(r.fidelity)
        if has_flips:
            row.append(_flips_cell(verdict))
        if has_quant_time:
            row.append(quantize_cell(r))
        if has_artifact:
            row.append(Cell(fmt.gigabytes(artifact_bytes(r)), "num"))
        if has_kernel:
            row.append(kernel_cell(r))
        reasons = verdict.reasons if verdict else ([r.reason] if r.reason else [])
        row.append(Cell("; ".join(reasons), "reasons"))
        table.rows.append(row)
    table.note = (
        f"Accuracy: value [{ci_label(selection)}]; cells below a floor are marked. Serving peak: the most memory the variant "
        "held from the end of its load through evaluation, latency and load tests (GPU reserved where a GPU was "
        "used, else the process's resident set); policy.max_memory_gb judges it. * marks an older record's "
        "whole-process peak (preparation and the fidelity baseline included). Plan est.: plan's weights + KV "
        "cache + activations at the shapes it ran + the runtime measured before it loaded. Load peak: loading "
        "the checkpoint; prepare peak: converting and quantizing in a process of its own (cached: all it needed was "
        "in the cache; not built: never converted, quantized or loaded). Quantize time: quantizing in this sweep; "
        "(cached): read from the cache, the time it took when it was made. Latency: batch 1 after warm-up. "
        "tok/s: best output "
        "tokens per second over the measured batch sizes. Flips: share of items whose correctness changed "
        "against the same model at the baseline precision (-: became wrong, +: became right). Kernel: what "
        "ran the linear layers (class of the first quantized one); marked: a quantized checkpoint run unpacked."
    )
    return table


NOT_BUILT = "not built"
NOT_BUILT_TITLE = "never converted, quantized or loaded in this sweep"


def prepare_cell(record: RunRecord) -> Cell:
    """The preparation peak: measured when its preparation process ran; else whether it found all it
    needed in the cache or was never prepared at all (a variant the search did not need, skipped)."""
    mem, how = record.memory, record.prepared
    checked = mem.prepare if mem is not None else None
    if how == "cache":  # a preparation process may have run, only to find it all there
        held = f" (the process that found them held {fmt.gigabytes(_phase_bytes(checked))} GB)" if checked else ""
        return Cell("cached", "num",
                    f"nothing to prepare: its checkpoint and fidelity reference were in the cache{held}")
    if checked is not None:
        return Cell(fmt.gigabytes(_phase_bytes(checked)), "num",
                    "converting, quantizing, the fidelity reference (own process)")
    if how == "none":
        return Cell(NOT_BUILT, "num muted", NOT_BUILT_TITLE)
    return Cell(fmt.DASH, "num", "prepared, its peak not recorded" if how == "built" else "")


def quantize_cell(record: RunRecord) -> Cell:
    """The quantization's wall time: spent in this sweep, or (cached) what it took when the artifact was
    made by an earlier run; not built for a variant never prepared."""
    quant = record.quant
    if quant is None or quant.quantize_s is None:
        if record.prepared == "none":
            return Cell(NOT_BUILT, "num muted", NOT_BUILT_TITLE)
        return Cell(fmt.DASH, "num")
    if record.quant_from_cache:
        return Cell(fmt.seconds(quant.quantize_s) + " (cached)", "num",
                    "read from the cache: the time it took when an earlier run quantized it")
    return Cell(fmt.seconds(quant.quantize_s), "num", "quantized in this sweep (its preparation process)")


def fidelity_cells(fid: Any) -> list[Cell]:
    """KL and top-1 agreement against the baseline. A server's top-k gives a lower bound (the least KL
    its log-probabilities allow), shown as "≥"; positions where it named none of the baseline's top
    tokens are counted and the cell marked: there the figure cannot grow however far the variant moved."""
    if fid is None:
        return [Cell(fmt.DASH, "num"), Cell(fmt.DASH, "num")]
    served = fid.method != "full"
    title = f"vs {fid.baseline}, {fid.positions} positions"
    if served:
        title += (f"; from the server's {fid.method} log-probabilities: the least KL they allow, a lower bound "
                  "of the full-vocabulary figure (docs/precisions.md)")
    kl, kind = ("≥ " if served else "") + fmt.sig(fid.mean_kl), "num"
    if fid.disjoint:
        kl += f" ({fid.disjoint}/{fid.positions} disjoint)"
        kind = "num below"
        title += (f"; at {fid.disjoint} positions the server named none of the baseline's top tokens: there the "
                  f"figure is the most its {fid.method} can show, however far the variant moved")
    return [Cell(kl, kind, title), Cell(fmt.pct(fid.top1_agreement), "num", title)]


def _peak_title(record: RunRecord, kind: str) -> str:
    """What the serving peak is; for a server, its footprint with the preallocated KV pool beside it."""
    mem = record.memory
    if mem is None or mem.footprint is None:
        return kind
    pool = fmt.gigabytes(mem.kv_pool_bytes) if mem.kv_pool_bytes is not None else "?"
    used = fmt.gigabytes(mem.kv_peak_bytes) if mem.kv_peak_bytes is not None else "?"
    return (f"{kind}: what the server needs, its footprint {fmt.gigabytes(_phase_bytes(mem.footprint))} GB with its "
            f"preallocated KV pool of {pool} GB replaced by the {used} GB in use at the peak")


def _phase_bytes(peak: Any) -> int | None:
    if peak is None:
        return None
    return peak.cuda_reserved_bytes if peak.cuda_reserved_bytes is not None else peak.rss_bytes


def _planned_cell(record: RunRecord, measured: int | None) -> Cell:
    planned = record.memory.planned_serving_bytes if record.memory else None
    if planned is None:
        return Cell(fmt.DASH, "num muted")
    ratio = f" ({measured / planned:.2f}x)" if measured else ""
    return Cell(fmt.gigabytes(planned) + ratio, "num", "plan's estimate of the serving peak; ratio: measured / plan")


def kernel_cell(record: RunRecord) -> Cell:
    """The kernel that ran the variant: a broken or unpacked kernel can pass for accuracy loss.
    A variant a started server served (record.serving) shows that server's kernel (its accuracy and
    speed are the server's), named as the record names it (ServingInfo.shown)."""
    k = record.kernel
    if record.serving is not None:
        s = record.serving
        text = f"{', '.join(s.kernels)} ({s.shown})" if s.kernels else f"{s.shown}, not quantized"
        in_process = f"in-process (fidelity, weights): {k.kernel}{' unpacked' if k.unpacked else ''}" if k else ""
        return Cell(text, "below" if s.packed is False else "",
                    "; ".join(x for x in (f"{s.shown} {s.version}: {s.quantization or 'no quantization'}", in_process)
                              if x))
    if k is None:
        return Cell(fmt.DASH, "muted")
    shown = (k.weight_class or k.linear_class).rsplit(".", 1)[-1]
    detail = [f"{k.linear_class}: {k.quantized_layers} quantized, {k.plain_layers} plain torch.nn.Linear layers"]
    detail += [f"weights held as {k.weight_class}"] if k.weight_class else []
    detail += [f"library kernel {k.library_kernel}"] if k.library_kernel else []
    detail += [f"asked for {k.requested}"] if k.requested != "auto" else []
    detail += [f"passed over: {'; '.join(k.fallbacks)}"] if k.fallbacks else []
    text = f"{k.kernel} ({shown})" + (" unpacked" if k.unpacked else "")
    return Cell(text, "below" if k.unpacked else "", "; ".join(detail),
                sub=k.library_kernel if k.library_kernel and k.library_kernel not in text else "")


def key_numbers(record: RunRecord, reference: RunRecord | None, selection: Selection) -> list[dict[str, str]]:
    """The winner's headline figures: label, value, and a short qualifier."""
    tiles: list[dict[str, str]] = []
    if record.memory:
        sub = ""
        if reference and reference.memory and reference is not record:
            share = record.memory.weight_bytes / reference.memory.weight_bytes
            sub = f"{share:.0%} of the reference"
        tiles.append({"label": "weight memory", "value": f"{fmt.gigabytes(record.memory.weight_bytes)} GB",
                      "sub": sub})
        peak, kind = peak_memory(record)
        if peak is not None:
            tiles.append({"label": "serving peak memory" if kind != PROCESS_PEAK else "process peak memory",
                          "value": f"{fmt.gigabytes(peak)} GB", "sub": kind})
    lat = record.perf.latency if record.perf else None
    if lat:
        tiles.append({"label": "e2e latency p50", "value": f"{fmt.millis(lat.e2e_ms.p50)} ms",
                      "sub": f"p95 {fmt.millis(lat.e2e_ms.p95)} ms, {lat.output_tokens} tokens"})
        tiles.append({"label": "TTFT p50", "value": f"{fmt.millis(lat.ttft_ms.p50)} ms",
                      "sub": f"{lat.prompt_tokens}-token prompt"})
    tput = best_throughput(record)
    if tput:
        tiles.append({"label": "throughput", "value": f"{fmt.sig(tput[0])} tok/s", "sub": f"batch {tput[1]}"})
    for task in task_names([record], selection):
        result, floor = record.tasks[task], task_floor(selection, task)
        value, ci = fmt.accuracy_ci(result, verdicts_by_variant(selection).get(record.name)).split(" ", 1)
        floor_text = f"\nfloor {fmt.pct(floor, 0)}" if floor is not None else ""
        tiles.append({"label": task, "value": value, "sub": f"{ci_label(selection)} {ci.strip('[]')}{floor_text}"})
    return tiles


def summary(records: list[RunRecord], selection: Selection) -> dict[str, Any]:
    by_name = {r.name: r for r in records}
    winner = by_name.get(selection.winner) if selection.winner else None
    reference = by_name.get(selection.reference) if selection.reference else None
    counts = {s: sum(1 for r in records if r.status == s)
              for s in ("completed", "stopped", "not_needed", "failed", "skipped")}
    return {
        "winner": selection.winner,
        "reference": selection.reference,
        "text": selection.summary,
        "tiles": key_numbers(winner, reference, selection) if winner else [],
        "warnings": selection.warnings,
        "power_note": selection.power_note,
        "counts": counts,
    }
