"""The report's secondary sections: statistics, failures, reproducibility, caveats.

Each builder returns None (or an empty list) when its data is absent, so the templates can skip
the section instead of printing an empty table.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from selector.report import fmt
from selector.report.view import Cell, Table, ci_label, order_records, task_names, verdicts_by_variant
from selector.stats_paired import holm
from selector.records import RunRecord
from selector.verdicts import Selection

def flag_alpha(selection: Selection) -> float:
    """The family-wise level of the paired table's flags (Holm over its cells): the policy's own, 1 - confidence."""
    return 1 - float(selection.policy.get("confidence") or 0.95)

DEQUANTIZED_NOTE = (
    "The 'full precision' baselines of these models are dequantized GGUF weights "
    "(4/5-bit rounding already applied)."
)
CPU_NOTE = (
    "Latency and throughput were measured on CPU: CPU latency figures say little about GPU speed-ups "
    "(on CPU, int8 and 4-bit kernels are often no faster than bf16, while on a GPU they usually are)."
)


def paired_table(records: list[RunRecord], selection: Selection) -> Table | None:
    """Each variant minus the reference on the same items: one row per variant, one column per task."""
    verdicts = verdicts_by_variant(selection)
    paired = [(r.name, verdicts[r.name].paired) for r in order_records(records)
              if r.name in verdicts and verdicts[r.name].paired]
    if not paired:
        return None
    named = task_names(records, selection)
    tasks = [t for t in named if any(t in p for _, p in paired)]
    tasks += sorted({t for _, p in paired for t in p} - set(named))
    table = Table(columns=["variant"] + tasks)
    alpha = flag_alpha(selection)
    cells = [(name, task, by_task[task]) for name, by_task in paired for task in tasks if task in by_task]
    tested = [(key, d.p) for key, d in ((c[:2], c[2]) for c in cells) if d.p is not None]
    adjusted = dict(zip([k for k, _ in tested], holm([p for _, p in tested])))
    for name, by_task in paired:
        row = [Cell(name, "name")]
        for task in tasks:
            d = by_task.get(task)
            if d is None:
                row.append(Cell(fmt.DASH, "num muted"))
                continue
            p_holm = adjusted.get((name, task))
            worse = p_holm is not None and p_holm < alpha and d.diff < 0
            test = "Wilcoxon" if d.test == "wilcoxon" else "McNemar"
            row.append(Cell(
                f"{fmt.points(d.diff)} {fmt.diff_ci(d.ci_low, d.ci_high).removesuffix(' pp')}",
                "num below" if worse else "num",
                f"n={d.n}; {d.flips_to_wrong} items right→wrong, {d.flips_to_right} wrong→right",
                sub=f"{test} p {fmt.pvalue(d.p)}, Holm {fmt.pvalue(p_holm)} · flips {d.flips_to_wrong}↓ {d.flips_to_right}↑",
            ))
        table.rows.append(row)
    table.note = (f"Reference: {selection.reference}. Each cell: variant accuracy minus reference accuracy "
                  f"on the same items, with its {ci_label(selection)} (0/1 scores: Tango's score interval; fractional scores: "
                  "a betting interval); the test's p (0/1 scores: McNemar's exact; fractional: Wilcoxon's signed-rank "
                  "on the raw scores) and the same p Holm-adjusted over every cell of this table; flips: items "
                  "the reference got right and the variant wrong (↓), and the reverse (↑; fractional scores cut "
                  f"at 0.5). Marked: significantly worse, Holm-adjusted p < {alpha:g} (1 - policy.confidence).")
    return table


def dict_table(rows: list[dict[str, Any]]) -> Table | None:
    """A free-form list of dicts (sensitivity, sample-size advice) as a table, keys in first-seen order."""
    if not rows:
        return None
    keys: list[str] = []
    for row in rows:
        keys += [k for k in row if k not in keys]
    table = Table(columns=[fmt.label(k) for k in keys], compact=True)
    for row in rows:
        table.rows.append([
            Cell(fmt.value(row.get(k)), "num" if isinstance(row.get(k), (int, float)) else "") for k in keys
        ])
    return table


def power_table(selection: Selection) -> Table | None:
    """Per task, what the rule can tell apart at its size (selection.power): the chance a variant a
    margin below the floor passes, the true accuracy needed to pass 80% of the time, and under
    non_inferiority the smallest margin shown for a truly equal variant and the items a margin needs."""
    rows = selection.power
    if not rows:
        return None
    ni = any("margin" in r for r in rows)
    floors = any("floor" in r for r in rows)
    columns = ["task", "items"]
    columns += ["floor", "a variant this far below passes", "passed 80% of the time from"] if floors else []
    columns += ["margin", "shown for a truly equal variant from", "identical answers: from",
                "items the margin needs"] if ni else []
    table = Table(columns=columns, compact=True)
    for r in rows:
        row = [Cell(r["task"]), Cell(str(r["n"]), "num")]
        if floors:
            known = "floor" in r
            row += [Cell(fmt.pct(r["floor"], 0) if known else fmt.DASH, "num"),
                    Cell(f"{fmt.points(-r['gap']).lstrip('+')}: {fmt.pct(r['passes_below'])}" if known else fmt.DASH,
                         "num"),
                    Cell(fmt.pct(r["truth_to_pass"]) if known and r["truth_to_pass"] is not None
                         else ("cannot pass" if known else fmt.DASH), "num")]  # fmt: skip
        if ni:
            flips = f" ({100 * r['discordance']:.0f}% flipping)" if r.get("discordance") is not None else ""
            row += [Cell(fmt.points(r["margin"]).lstrip("+") if "margin" in r else fmt.DASH, "num"),
                    Cell(fmt.points(r["detectable"]).lstrip("+") + flips if "margin" in r else fmt.DASH, "num"),
                    Cell(fmt.points(r["identical"]).lstrip("+") if "margin" in r else fmt.DASH, "num"),
                    Cell(str(r["needed"]) if r.get("needed") else fmt.DASH, "num")]
        table.rows.append(row)
    confidence = float(selection.policy.get("confidence") or 0.95)
    table.note = (f"Exact for 0/1 scores (every count, or every paired table up to 250 items), through the "
                  f"intervals and tests the verdict uses, at {confidence:.0%} confidence and 80% power. "
                  "\"This far below\": the policy's margin (policy.margins, default_margin) under the floor. "
                  "Non-inferiority: a variant truly equal to the reference, at the winner's share of answers "
                  "flipping (else 10%); identical answers are the best case. Fractional scores: computed as for "
                  "0/1 scores (their spread is at most that), and under non-inferiority for identical scores only. "
                  "See docs/selection.md.")
    return table


def noise_table(noise_floor: dict[str, float]) -> Table | None:
    if not noise_floor:
        return None
    table = Table(columns=["task", "score spread with nothing changed"], compact=True)
    for task, spread in noise_floor.items():
        table.rows.append([Cell(task), Cell(fmt.points(spread).lstrip("+"), "num")])
    return table


def agreement_table(records: list[RunRecord]) -> Table | None:
    """Per variant and task evaluated both in-process and through its server: how many answers
    differ, both accuracies, and a few of the differing items."""
    rows = [(r, task, a) for r in records for task, a in sorted(r.agreement.items())]
    if not rows:
        return None
    table = Table(columns=["variant", "task", "items", "answers differ", "in-process", "served", "examples"])
    for r, task, a in rows:
        decides = (r.config or {}).get("accuracy_engine", "served")
        examples = "; ".join(f"{e['id']}: {e['in_process']!r} vs {e['served']!r}" for e in a.examples)
        table.rows.append([Cell(r.name), Cell(task), Cell(str(a.n), "num"), Cell(str(a.differ), "num"),
                           Cell(fmt.pct(a.in_process_value) + (" *" if decides == "in_process" else ""), "num"),
                           Cell(fmt.pct(a.served_value) + (" *" if decides == "served" else ""), "num"),
                           Cell(examples or "—", "muted" if not examples else "")])
    table.note = ("* the accuracy the verdict uses: the served engine's, unless policy.deploy_engine=hf "
                  "(transformers in-process). Examples: item id: in-process answer vs served answer.")
    return table


def serving_table(records: list[RunRecord]) -> Table | None:
    """Per variant a server the harness started served (record.serving: engine=vllm): how it ran the
    weights, on how many instances and cores, and how the requests spread over them (read from its
    own log and /metrics), labelled as each record says (ServingInfo.shown)."""
    served = [r for r in records if r.serving is not None]
    if not served:
        return None
    labels = {r.serving.shown for r in served if r.serving is not None}
    # One server for all: its name heads the column (and the section: "How vLLM served each variant").
    one = labels.pop() if len(labels) == 1 else None
    table = Table(columns=["variant", one or "server", "quantization", "kernel", "weights", "instances (cores)",
                           "requests per instance", "start s"])
    for r in served:
        s = r.serving
        assert s is not None
        weights = "not quantized" if s.packed is None else "packed" if s.packed else "unpacked"
        cores = f"{s.instances} ({' | '.join(s.cores)})" if s.cores else str(s.instances)
        requests = " / ".join("?" if n is None else str(n) for n in s.requests) or fmt.DASH
        version = s.version or fmt.DASH if one else " ".join(x for x in (s.shown, s.version) if x)
        table.rows.append([Cell(r.name), Cell(version), Cell(s.quantization or "none"),
                           Cell(", ".join(s.kernels) or fmt.DASH), Cell(weights), Cell(cores, "num"),
                           Cell(requests, "num"), Cell(fmt.DASH if s.start_s is None else f"{s.start_s:.0f}", "num")])
    table.note = ("From each server's own log (the quantization method and the linear kernel it chose) and its "
                  "/metrics (the requests each instance finished). Instances split the cores shown; requests go to "
                  "them in turn.")
    return table


def failures(records: list[RunRecord]) -> list[dict[str, str]]:
    """Failed and skipped variants, with what happened and where."""
    out = []
    for r in order_records(records):
        if r.status in ("completed", "stopped", "not_needed"):  # the search section tells those
            continue
        err = r.error
        out.append({
            "variant": r.name, "status": r.status,
            "stage": err.stage if err else "",
            "type": err.type if err else "",
            "message": err.message if err else r.reason,
            "log_tail": err.log_tail if err else "",
        })
    return out


def search(records: list[RunRecord], context: dict[str, Any]) -> dict[str, Any] | None:
    """How an adaptive search went: per variant what it saw and why it stopped where it did, and
    the work it saved against the full grid (None for a grid sweep)."""
    info = context.get("search") or {}
    if info.get("strategy") != "adaptive":
        return None
    saved = info.get("savings") or {}
    table = Table(columns=["variant", "outcome", "items scored", "why"])
    order = {name: i for i, name in enumerate([*info.get("first", []), *info.get("order", [])])}
    searched = {v["name"]: v["reason"] for v in info.get("verdicts", [])}
    for r in sorted(records, key=lambda r: order.get(r.name, len(order))):
        seen = f"{r.search.items_evaluated} of {r.search.items_total}" if r.search else fmt.DASH
        if r.search and r.search.items_reused:
            seen += f" ({r.search.items_reused} kept from an earlier run)"
        why = r.reason
        if r.status == "completed":
            why = "every item; " + searched.get(r.name, "judged on the full set")
        table.rows.append([Cell(r.name, "name"), Cell(r.status.replace("_", " "), f"badge {r.status}"),
                           Cell(seen, "num"), Cell(why.removeprefix("stopped early: "), "")])
    table.note = ("Variants in the order the search took them (smallest planned weight memory first, each model's "
                  "baseline before its other precisions; under winner_control=fixed_sequence, the size ladder from "
                  "the largest). A stopped variant's floor was out of reach with probability at least 1 - alpha over "
                  "the item order (an anytime-valid bound); a variant not needed as the sibling of a baseline far "
                  "below a floor would have had to gain more than search.sibling_margin on that task; see "
                  "docs/search.md.")
    width, waves = wave_lines(info)
    seed_line = order_seed_line(info.get("order_seed"), info.get("order_seed_source"))
    return {
        "table": table,
        "width": width,
        "waves": waves,
        "notes": [*info.get("notes", []), *([seed_line] if seed_line else [])],
        "line": (f"{saved.get('variants_measured', 0):.0f} of {saved.get('variants', 0):.0f} variants measured, "
                 f"{saved.get('items_evaluated', 0):.0f} of {saved.get('grid_items', 0):.0f} items scored"
                 + (f", {saved['siblings_not_needed']:.0f} not needed as siblings of a baseline far below a floor "
                    "(never converted, quantized or loaded)" if saved.get("siblings_not_needed") else "") + "; the "
                 f"variants took {fmt.seconds(saved.get('spent_s'))} against about "
                 f"{fmt.seconds(saved.get('grid_estimate_s'))} for the full grid (an estimate from this sweep's "
                 "own timings)") if saved else "",
    }


def wave_lines(search: dict[str, Any]) -> tuple[str, list[str]]:
    """The waves the search handed the launcher, for the console and the report: a heading with the
    width and where it came from, then one line per wave (its kind, wall time, variants)."""
    waves = search.get("waves") or []
    if not waves:
        return "", []
    workers, source = search.get("workers"), search.get("width_source")
    heading = (f"{len(waves)} wave{'s' if len(waves) != 1 else ''} of up to {workers} variant"
               f"{'s' if workers != 1 else ''} at a time" + (f" ({source})" if source else ""))
    lines = []
    for number, wave in enumerate(waves, 1):
        took = f", {wave['wall_s']:.0f} s" if wave.get("wall_s") is not None else ""
        lines.append(f"wave {number} ({wave['kind']}{took}): {', '.join(wave['names'])}")
    return heading, lines


SEED_SOURCES = {"search.seed": "set by search.seed", "seed": "set by seed=",
                "kept": "drawn by an earlier sweep of this eval set in this output folder, kept",
                "drawn": "drawn for this sweep, kept for this eval set in this output folder"}


def order_seed_line(seed: int | None, source: str | None) -> str:
    """Where the item order came from, and how to replay it (selector.sweep.order_seed)."""
    if seed is None:
        return ""
    return f"Item order: seed {seed} ({SEED_SOURCES.get(source or '', source or 'recorded')}); replay it with search.seed={seed}."


def environment(records: list[RunRecord], context: dict[str, Any]) -> list[tuple[str, str]]:
    env = dict(context.get("environment") or next((r.environment for r in records if r.environment), {}))
    # The code sandbox's layers are known where the variants ran (machines may differ): each record has its own.
    sandboxes: dict[str, list[str]] = {}
    for r in order_records(records):
        if r.environment.get("code_sandbox"):
            sandboxes.setdefault(fmt.value(r.environment["code_sandbox"]), []).append(r.name)
    if len(sandboxes) == 1:
        env["code_sandbox"] = next(iter(sandboxes))
    elif sandboxes:
        env["code_sandbox"] = "; ".join(f"{layers} ({', '.join(names)})" for layers, names in sandboxes.items())
    return [(str(k), fmt.value(v)) for k, v in env.items()]


def config_text(context: dict[str, Any]) -> str:
    """The resolved config as YAML, the form a user writes it in (via JSON: any value becomes plain data)."""
    config = context.get("config")
    if not config:
        return ""
    plain = json.loads(json.dumps(config, default=str))
    return yaml.safe_dump(plain, sort_keys=False, allow_unicode=True, default_flow_style=False)


def mlflow(records: list[RunRecord], context: dict[str, Any]) -> dict[str, Any] | None:
    uri = context.get("tracking_uri")
    runs = [(r.name, r.mlflow_run_id) for r in order_records(records) if r.mlflow_run_id]
    if not uri and not runs and not context.get("parent_run_id"):
        return None
    return {
        "uri": uri or fmt.DASH,
        "experiment": context.get("experiment") or fmt.DASH,
        "parent": context.get("parent_run_id") or fmt.DASH,
        "runs": runs,
        "command": f"mlflow ui --backend-store-uri {uri}" if uri else "",
    }


def devices(records: list[RunRecord], context: dict[str, Any]) -> set[str]:
    found = {r.perf.device for r in records if r.perf and r.perf.device}
    env_device = (context.get("environment") or {}).get("device")
    return found | ({str(env_device)} if env_device and not found else set())


def caveats(records: list[RunRecord], context: dict[str, Any]) -> list[str]:
    """Plain statements about what the figures do not show."""
    out = []
    dequantized = sorted({
        r.variant.model for r in records
        if "dequantized" in str(((r.config or {}).get("model") or {}).get("notes", "")).lower()
    })
    if dequantized:
        out.append(f"{DEQUANTIZED_NOTE} Models: {', '.join(dequantized)}.")
    if any(d == "cpu" or d.startswith("cpu") for d in devices(records, context)):
        out.append(CPU_NOTE)
    for note, names in loading_notes(records).items():
        out.append(f"{note} ({', '.join(names)}).")
    busy = {r.name: r.environment["machine_load"]["other_cpu_share"] for r in records
            if (r.environment.get("machine_load") or {}).get("busy")}
    if busy:
        shares = ", ".join(f"{name} {100 * share:.0f}%" for name, share in busy.items())
        out.append("The machine was busy: other processes used this share of its CPU while these variants ran "
                   f"({shares}); their latency and throughput figures are slower than the variant alone would be, "
                   "and a torch on every core beside another one slows both several-fold. Measure again on a "
                   "quiet machine, or set threads= so the two do not share cores.")
    return out


def loading_notes(records: list[RunRecord]) -> dict[str, list[str]]:
    """Each distinct note a precision backend left while loading, with the variants it concerns."""
    notes: dict[str, list[str]] = {}
    for r in records:
        for note in r.quant.notes if r.quant else []:
            if not note.startswith("reused cached artifact"):  # bookkeeping, not a caveat
                notes.setdefault(note.rstrip("."), []).append(r.variant.name)
    return notes


def meta(records: list[RunRecord], context: dict[str, Any]) -> list[tuple[str, str]]:
    """The sweep's identity line: experiment, when, where, how long."""
    items = [("experiment", context.get("experiment")), ("created", context.get("created_at")),
             ("sweep folder", context.get("sweep_dir")), ("variants", str(len(records))),
             ("sweep wall time", fmt.seconds(context.get("wall_time_s"))
              if context.get("wall_time_s") is not None else None)]
    return [(k, str(v)) for k, v in items if v]
