"""Serving settings of one model x precision, side by side: which one meets the latency SLO at the
highest goodput.

Settings of a model x precision share its scored items (so its accuracy) and its weights; what a
serving knob changes is how the load test went, and most under the heaviest load (at concurrency
1 a batch never holds more than one request, whatever max_batch_size says). So the settings are
compared at the heaviest load level they all ran (the highest concurrency, else the highest rate).
Per setting:
- its goodput there: the requests per second that met every limit of measure.load.slo (without
  that SLO, every successful request: throughput);
- whether it meets the policy's latency limits (policy.latency_limits, e.g. e2e_ms_p95@8), at
  whatever levels they name.
The best setting meets the limits at the highest goodput (ties: the lower e2e p95 there, then the
name). Selection ranks settings of one model x precision in this order when the objective and
accuracy leave them tied, so the recommendation and this comparison agree.
"""

from __future__ import annotations


from selector.config import PolicyConfig
from selector.selection.measures import latency_value, parse_latency_key
from selector.records import LoadLevel, RunRecord, setting_label
from selector.verdicts import SettingChoice, SettingResult

CLOSE = 0.05  # a lead smaller than this (relative) is within a figure measured once (as `compare` judges it)
KNOB_BLIND = ("weight_memory", "latency")  # objectives no serving knob changes (single-request latency runs unbatched)


def setting_groups(records: list[RunRecord]) -> dict[str, list[RunRecord]]:
    """model/precision -> its completed records at two or more settings."""
    groups: dict[str, list[RunRecord]] = {}
    for r in records:
        if r.status == "completed" and r.variant.setting:
            groups.setdefault(r.variant.base_name, []).append(r)
    return {name: rs for name, rs in groups.items() if len(rs) > 1}


def _figure(level: LoadLevel, by_goodput: bool) -> float:
    return (level.goodput_rps or 0.0) if by_goodput else level.request_throughput


def _key(level: LoadLevel) -> tuple[bool, float]:
    """Heavier sorts later: any concurrency after any rate, then by its value."""
    return (level.concurrency is not None, float(level.concurrency or level.rate_rps or 0.0))


def heaviest_common(records: list[RunRecord]) -> tuple[bool, float] | None:
    """The heaviest load level every one of these records ran, as _key gives it."""
    sets = [{_key(lv) for lv in (r.perf.load if r.perf else [])} for r in records]
    common = set.intersection(*sets) if sets else set()
    return max(common) if common else None


def _level_name(level: LoadLevel) -> str:
    return f"concurrency {level.concurrency}" if level.concurrency is not None else f"{level.rate_rps:g} req/s"


def setting_result(record: RunRecord, policy: PolicyConfig, by_goodput: bool,
                   at: tuple[bool, float] | None = None) -> SettingResult:
    """One setting's figures at the level `at` (its own heaviest when None)."""
    levels = record.perf.load if record.perf else []
    failed = []
    for key, limit in sorted(policy.latency_limits.items()):
        value = latency_value(record, parse_latency_key(key))
        if value is None or value > limit:
            failed.append(f"{key} {'not measured' if value is None else f'{value:.0f} ms'} > {limit:g} ms")
    level = next((lv for lv in levels if _key(lv) == at), None) or max(levels, key=_key, default=None)
    return SettingResult(
        variant=record.name, setting=record.variant.setting,
        level=_level_name(level) if level else "",
        goodput_rps=_figure(level, by_goodput) if level else None,
        e2e_p95_ms=level.e2e_ms.p95 if level and level.e2e_ms else None,
        meets=not failed, detail="; ".join(failed),
    )


def _order(result: SettingResult) -> tuple[bool, float, float, str]:
    return (not result.meets, -(result.goodput_rps or 0.0), result.e2e_p95_ms or float("inf"), result.variant)


def choose_settings(records: list[RunRecord], policy: PolicyConfig) -> list[SettingChoice]:
    """One comparison per model x precision measured at two or more settings."""
    out = []
    for group, rs in sorted(setting_groups(records).items()):
        slo = any(((r.config.get("measure") or {}).get("load") or {}).get("slo") for r in rs)
        at = heaviest_common(rs)
        results = sorted((setting_result(r, policy, slo, at) for r in rs), key=_order)
        best = results[0] if results[0].meets and results[0].goodput_rps else None
        out.append(SettingChoice(group=group, basis="goodput" if slo else "throughput",
                                 best=best.variant if best else None,
                                 summary=_summary(group, results, best, slo, policy), results=results))
    return out


def _summary(group: str, results: list[SettingResult], best: SettingResult | None, slo: bool,
             policy: PolicyConfig) -> str:
    what = "goodput" if slo else "throughput"
    unit = "req/s within the SLO" if slo else "req/s"
    if best is None:
        closest = results[0]
        why = closest.detail or "no load level served a request within the SLO"
        return f"{group}: no setting meets the latency limits; the closest, {setting_label(closest.setting)}: {why}."
    others = [r for r in results if r is not best]
    against = ", ".join(f"{r.goodput_rps or 0:.3g} for {setting_label(r.setting)}"
                        + ("" if r.meets else f" (misses {r.detail})") for r in others)
    limits = "meets the latency limits at" if policy.latency_limits else "has"
    caveat = "" if slo or policy.latency_limits else (
        " No latency SLO was set (measure.load.slo, policy.latency_limits), so this is throughput alone.")
    runner_up = max((r.goodput_rps or 0.0 for r in others if r.meets), default=0.0)
    if best.goodput_rps and runner_up and best.goodput_rps - runner_up < CLOSE * best.goodput_rps:
        caveat += (f" The lead is under {CLOSE:.0%}, within what one load test measures: run it again before "
                   "relying on it.")
    return (f"{group}: {setting_label(best.setting)} {limits} the highest {what}, {best.goodput_rps:.3g} {unit} at "
            f"{best.level} (e2e p95 {best.e2e_p95_ms or 0:.0f} ms), against {against}.{caveat}")


def setting_rank(records: list[RunRecord], policy: PolicyConfig) -> dict[str, int]:
    """Variant name -> its place among the settings of its model x precision (0: the best)."""
    ranks: dict[str, int] = {}
    for choice in choose_settings(records, policy):
        ranks.update({r.variant: i for i, r in enumerate(choice.results)})
    return ranks


def shared_objectives(records: dict[str, RunRecord], objectives: dict[str, float | None],
                      objective: str) -> dict[str, float | None]:
    """For ranking only: settings of one model x precision share an objective no knob changes
    (their weights, their unbatched single-request latency), the best any of them measured, so
    their own measurement noise does not pick between them; the settings' order does."""
    if objective not in KNOB_BLIND:
        return objectives
    best: dict[str, float] = {}
    for name, r in records.items():
        value = objectives.get(name)
        if r.variant.setting and value is not None:
            best[r.variant.base_name] = min(value, best.get(r.variant.base_name, value))
    shared = {}
    for name, value in objectives.items():
        record = records[name]
        grouped = record.variant.setting and value is not None
        shared[name] = best.get(record.variant.base_name, value) if grouped else value
    return shared
