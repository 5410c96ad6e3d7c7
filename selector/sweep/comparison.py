"""Two sweeps compared, in one place: each side read (a sweep folder or an MLflow parent run id), what
differs in their resolved configs and, per variant in both, how accuracy, latency, throughput and
memory moved, each change against its noise (`compare_sweeps`), and the result kept (compare.md /
compare.json, attached to the later sweep's parent run). `selector compare A B`, a sweep's
`compare_to=` and `selector select` on a sweep that names one all go through here; the tables are
report.compare_view's.

Noise (docs/load-testing.md, "Comparing sweeps", states the same):
- accuracy: the paired 95% interval of the difference over the items both scored (the selection's
  paired_diff: Tango's score interval for 0/1 scores, a betting interval for fractional ones) and,
  where a sweep measured one, its noise floor (measure.noise_floor): a change whose interval holds
  0, or no larger than the noise floor, is noise;
- a latency percentile: each run's own spread, from its repeated measurements (sigma ~ (p90 - p50) /
  1.28, the standard error of quantile q from n samples, sigma * sqrt(q(1-q)/n) / phi(z_q)), as
  1.96 * sqrt(se_A^2 + se_B^2), and never less than 5% of the earlier value (runs at different times
  drift by more than their own spread shows);
- a figure measured once (requests/s, tokens/s, goodput, peak memory): 5% of the earlier value;
- weight memory is exact: any change is real.
Drift: when only measure.load.* keys differ (a serving change), the single-request figures (batch 1,
measured outside the batcher) cannot have moved because of it; they are the control, and their e2e
p50's relative change is the machine's drift between the two runs. A load figure that moved by no
more than that is "within drift", not better or worse.

`compare_sweeps` is pure: records and configs in, plain data out (report.json and MLflow keep it).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from selector.config import SelectorConfig
from selector.errors import UserError
from selector.selection.measures import serving_peak
from selector.records import LoadLevel, Percentiles, RunRecord
from selector.sweep.state import SweepState

log = logging.getLogger("selector.sweep.comparison")

RELATIVE = 0.05  # the least change that is not noise, relative to the earlier value
Z = 1.96
EPS = 1e-9  # 17/20 - 18/20 is not exactly -0.05 in floating point
_PHI = {"p50": (0.50, 0.3989), "p90": (0.90, 0.1755), "p95": (0.95, 0.1031), "p99": (0.99, 0.0267)}  # q, density at z_q
CONTROL = "e2e (batch 1) p50"  # the drift between the runs, when the change is to serving only
UNTOUCHED = ("(batch 1)", "tok/s at batch")  # measures a measure.load change cannot move
PER_VARIANT_AXES = ("model", "precision")  # vary between a sweep's variants: compared as variants, not as config
BOOKKEEPING = ("compare_to",)


@dataclass(frozen=True)
class Side:
    """One sweep: what the user named it by, its records and its resolved config."""

    label: str
    records: list[RunRecord]
    config: dict[str, Any]
    parent_run_id: str | None = None
    tracking_uri: str = ""
    started_at: float | None = None


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        out.update(flatten(v, key) if isinstance(v, dict) and v else {key: v})
    return out


def config_diff(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Dotted keys whose values differ (model and precision are the variants, compared below)."""
    fa, fb = flatten(a), flatten(b)
    keys = sorted(set(fa) | set(fb))
    skip = lambda k: k.split(".")[0] in PER_VARIANT_AXES + BOOKKEEPING  # noqa: E731
    return [{"key": k, "a": fa.get(k), "b": fb.get(k)} for k in keys if not skip(k) and fa.get(k) != fb.get(k)]


def match_variants(a: list[RunRecord], b: list[RunRecord]) -> list[tuple[RunRecord, RunRecord]]:
    """Completed variants in both: by name, else by model/precision where each side has it once
    (a sweep that swept a serving knob against one that did not)."""
    da = {r.name: r for r in a if r.status == "completed"}
    db = {r.name: r for r in b if r.status == "completed"}
    pairs = [(da[n], db[n]) for n in sorted(da.keys() & db.keys())]
    rest_a = [r for n, r in da.items() if n not in db]
    rest_b = [r for n, r in db.items() if n not in da]
    for ra in rest_a:
        same_a = [r for r in rest_a if r.variant.base_name == ra.variant.base_name]
        same_b = [r for r in rest_b if r.variant.base_name == ra.variant.base_name]
        if len(same_a) == 1 and len(same_b) == 1:
            pairs.append((ra, same_b[0]))
    return pairs


def _se(p: Percentiles, stat: str) -> float:
    q, density = _PHI[stat]
    sigma = max(0.0, p.p90 - p.p50) / 1.2816
    return sigma * math.sqrt(q * (1 - q) / max(1, p.n)) / density


def latency_noise(a: Percentiles, b: Percentiles, stat: str) -> float:
    return max(RELATIVE * abs(getattr(a, stat)), Z * math.hypot(_se(a, stat), _se(b, stat)))


def verdict(change: float, noise: float | None, higher_is_better: bool) -> str:
    if change == 0:
        return "same"
    if noise is not None and abs(change) <= noise + EPS:
        return "within noise"
    return "better" if (change > 0) == higher_is_better else "worse"


def _row(variant: str, measure: str, unit: str, a: float | None, b: float | None, noise: float | None,
         higher_is_better: bool, how: str) -> dict[str, Any] | None:
    if a is None or b is None:
        return None
    change = b - a
    return {"variant": variant, "measure": measure, "unit": unit, "a": a, "b": b, "change": change, "noise": noise,
            "noise_from": how, "verdict": verdict(change, noise, higher_is_better)}


def accuracy_rows(name: str, ra: RunRecord, rb: RunRecord) -> list[dict[str, Any]]:
    from selector.selection.evidence import paired_diff

    rows = []
    floor_a, floor_b = ra.config.get("noise_floor") or {}, rb.config.get("noise_floor") or {}
    for task in sorted(ra.tasks.keys() & rb.tasks.keys()):
        ta, tb = ra.tasks[task], rb.tasks[task]
        diff = paired_diff(tb, ta, 0.95, 2000, 0)
        floor = max(float(floor_a.get(task, 0.0)), float(floor_b.get(task, 0.0)))
        noise, how = (floor, "noise floor") if floor else (None, "")
        if diff is not None:
            # The interval's reach toward 0: the change is within it exactly when the interval holds 0.
            toward_zero = diff.diff - diff.ci_low if diff.diff >= 0 else diff.ci_high - diff.diff
            noise = max(toward_zero, floor)
            how = f"paired 95% CI over {diff.n} items" + (" and noise floor" if floor else "")
        row = _row(name, f"accuracy {task}", "%", ta.value, tb.value, noise, ta.higher_is_better, how)
        if row:
            rows.append(row)
    return rows


def _pct_rows(name: str, label: str, pa: Percentiles | None, pb: Percentiles | None,
              stats: tuple[str, ...] = ("p50", "p95", "p99")) -> list[dict[str, Any]]:
    if pa is None or pb is None:
        return []
    rows = [_row(name, f"{label} {stat}", "ms", getattr(pa, stat), getattr(pb, stat), latency_noise(pa, pb, stat),
                 False, "each run's own spread") for stat in stats]
    return [r for r in rows if r]


def _once(name: str, measure: str, unit: str, a: float | None, b: float | None, higher: bool) -> list[dict[str, Any]]:
    row = _row(name, measure, unit, a, b, RELATIVE * abs(a) if a is not None else None, higher, "5% (measured once)")
    return [row] if row else []


def _levels(record: RunRecord) -> dict[str, LoadLevel]:
    out = {}
    for lv in record.perf.load if record.perf else []:
        out[f"c={lv.concurrency}" if lv.concurrency is not None else f"{lv.rate_rps:g} req/s"] = lv
    return out


def perf_rows(name: str, ra: RunRecord, rb: RunRecord) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    la, lb = (ra.perf.latency if ra.perf else None), (rb.perf.latency if rb.perf else None)
    if la and lb:
        rows += _pct_rows(name, "TTFT (batch 1)", la.ttft_ms, lb.ttft_ms)
        rows += _pct_rows(name, "e2e (batch 1)", la.e2e_ms, lb.e2e_ms)
    ta = {p.batch_size: p for p in (ra.perf.throughput if ra.perf else [])}
    tb = {p.batch_size: p for p in (rb.perf.throughput if rb.perf else [])}
    for size in sorted(ta.keys() & tb.keys()):
        rows += _once(name, f"tok/s at batch {size}", "tok/s", ta[size].output_tokens_per_s,
                      tb[size].output_tokens_per_s, True)
    levels_a, levels_b = _levels(ra), _levels(rb)
    for level in [k for k in levels_a if k in levels_b]:
        a, b = levels_a[level], levels_b[level]
        rows += _once(name, f"{level} req/s", "req/s", a.request_throughput, b.request_throughput, True)
        rows += _once(name, f"{level} output tok/s", "tok/s", a.output_tokens_per_s, b.output_tokens_per_s, True)
        rows += _once(name, f"{level} goodput", "req/s", a.goodput_rps, b.goodput_rps, True)
        rows += _pct_rows(name, f"{level} TTFT", a.ttft_ms, b.ttft_ms)
        rows += _pct_rows(name, f"{level} e2e", a.e2e_ms, b.e2e_ms)
        for part, label in (("queue_ms", "queue"), ("batch_wait_ms", "batch wait"), ("compute_ms", "compute")):
            rows += _pct_rows(name, f"{level} {label}", getattr(a, part), getattr(b, part), ("p50", "p95"))
    return rows


def memory_rows(name: str, ra: RunRecord, rb: RunRecord) -> list[dict[str, Any]]:
    ma, mb = ra.memory, rb.memory
    if ma is None or mb is None:
        return []
    rows = []
    weight = _row(name, "weight memory", "GB", ma.weight_bytes / 1e9, mb.weight_bytes / 1e9, 0.0, False, "exact")
    if weight:
        rows.append(weight)
    peak_a, _ = serving_peak(ra)
    peak_b, _ = serving_peak(rb)
    rows += _once(name, "serving peak memory", "GB", peak_a / 1e9 if peak_a else None, peak_b / 1e9 if peak_b else None, False)
    return rows


def compare_sweeps(a: Side, b: Side) -> dict[str, Any]:
    """The comparison as plain data; raises ValueError naming what is missing when no variant is in both."""
    pairs = match_variants(a.records, b.records)
    if not pairs:
        def names(side: Side) -> str:
            return ", ".join(sorted(r.name for r in side.records if r.status == "completed")) or "none"

        raise ValueError(f"no completed variant in common: {a.label} has {names(a)}; {b.label} has {names(b)}")
    matched_a, matched_b = {ra.name for ra, _ in pairs}, {rb.name for _, rb in pairs}
    rows: list[dict[str, Any]] = []
    for ra, rb in pairs:
        name = rb.name if ra.name == rb.name else f"{ra.name} → {rb.name}"
        rows += accuracy_rows(name, ra, rb) + perf_rows(name, ra, rb) + memory_rows(name, ra, rb)
    evalsets = {(ra.config.get("evalset_hash"), rb.config.get("evalset_hash")) for ra, rb in pairs}
    diff = config_diff(a.config, b.config)
    diff += [{"key": "evalset content (hash)", "a": ha, "b": hb} for ha, hb in sorted(evalsets, key=str) if ha != hb]
    drift = {}
    if diff and all(d["key"].startswith("measure.load.") for d in diff):
        drift = {name: d for name in {r["variant"] for r in rows} if (d := apply_drift(rows, name)) is not None}
    busy = [side.label for side in (a, b)
            if any((r.environment.get("machine_load") or {}).get("busy") for r in side.records)]
    return {
        "busy": ["A" if label == a.label else "B" for label in busy],
        "a": {"label": a.label, "parent_run_id": a.parent_run_id, "started_at": a.started_at},
        "b": {"label": b.label, "parent_run_id": b.parent_run_id, "started_at": b.started_at},
        "config": diff,
        "only_a": sorted(r.name for r in a.records if r.name not in matched_a),
        "only_b": sorted(r.name for r in b.records if r.name not in matched_b),
        "variants": [rb.name if ra.name == rb.name else f"{ra.name} → {rb.name}" for ra, rb in pairs],
        "rows": rows,
        "drift": drift,
    }


def apply_drift(rows: list[dict[str, Any]], variant: str) -> float | None:
    """Mark one variant's rows against the drift its control shows; the drift (relative), or None."""
    mine = [r for r in rows if r["variant"] == variant]
    control = next((r for r in mine if r["measure"] == CONTROL), None)
    if control is None or not control["a"]:
        return None
    drift = abs(control["change"]) / abs(control["a"])
    for r in mine:
        if any(mark in r["measure"] for mark in UNTOUCHED):
            r["verdict"] = "control"
        elif r["unit"] in ("ms", "req/s", "tok/s") and r["verdict"] in ("better", "worse") \
                and abs(r["change"]) <= drift * abs(r["a"]) + EPS:
            r["verdict"] = "within drift"
    return drift


# ---- the sides read, the comparison kept ----

def load_side(source: str, tracking_uri: str | None = None, output_dir: str | Path | None = None) -> Side:
    """One side of a comparison: a sweep folder or an MLflow parent run id, read as from_source does."""
    from selector.sweep.stored import from_source

    sweep = from_source(source, tracking_uri, output_dir)
    config = sweep.config or sweep.records[0].config
    return Side(str(source), sweep.records, config, sweep.state.parent_run_id,
                sweep.state.tracking_uri, sweep.state.started_at)


def compare_sides(a: Side, b: Side) -> dict[str, Any]:
    """compare_sweeps, with nothing in common a UserError saying what each side has."""
    try:
        return compare_sweeps(a, b)
    except ValueError as e:
        raise UserError(f"compare: {e}") from None


def this_sweep(base: Path, records: list[RunRecord], state: SweepState) -> Side:
    return Side(str(base), records, state.config or {}, state.parent_run_id, state.tracking_uri, state.started_at)


def compare_with_predecessor(cfg: SelectorConfig, this: Side) -> dict[str, Any]:
    """This sweep against the one it names (compare_to), for its report; a failure is said there."""
    try:
        before = load_side(str(cfg.compare_to), cfg.tracker.tracking_uri, cfg.output_dir)
        return compare_sides(before, this)
    except UserError as e:  # checked before the sweep started; the predecessor may have moved since
        log.warning("%s", e)
        return {"error": str(e), "a": {"label": cfg.compare_to}, "b": {"label": this.label}}


def later(a: Side, b: Side) -> Side:
    """The sweep that started last (B when either time is unknown)."""
    if a.started_at is not None and b.started_at is not None and a.started_at > b.started_at:
        return a
    return b


def write_comparison(comparison: dict[str, Any], out: Path) -> dict[str, Path]:
    from selector.report.render import render_comparison_markdown

    out.mkdir(parents=True, exist_ok=True)
    paths = {"md": out / "compare.md", "json": out / "compare.json"}
    paths["md"].write_text(render_comparison_markdown(comparison), encoding="utf-8")
    paths["json"].write_text(json.dumps(comparison, indent=2, default=str), encoding="utf-8")
    return paths


def log_comparison(comparison: dict[str, Any], first: Side, last: Side, paths: dict[str, Path]) -> str | None:
    """Attach the comparison to the later sweep's parent run; the run id, or None without one."""
    from selector.report.compare_view import headline
    from selector.trackers.comparison import attach_to_run

    if not last.parent_run_id or not last.tracking_uri:
        return None
    tags = {"selector.compared_to": first.parent_run_id or first.label, "selector.comparison": headline(comparison)}
    return attach_to_run(last.tracking_uri, last.parent_run_id, list(paths.values()), tags)


def keep_comparison(comparison: dict[str, Any] | None, state: SweepState, base: Path) -> None:
    """A sweep's comparison with its predecessor: its own files beside the report, and on the
    sweep's parent run."""
    if not comparison or comparison.get("error"):
        return
    paths = write_comparison(comparison, base / "report")
    before = Side(comparison["a"]["label"], [], {}, comparison["a"].get("parent_run_id"))
    log_comparison(comparison, before, Side(str(base), [], {}, state.parent_run_id, state.tracking_uri), paths)
