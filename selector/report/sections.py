"""The report's secondary sections: engines' agreement, servers, failures, reproducibility, caveats.
(Statistics: statistics_view; the adaptive search: search_view.)

Each builder returns None (or an empty list) when its data is absent, so the templates can skip
the section instead of printing an empty table.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from selector.report import fmt
from selector.report.view import Cell, Table, order_records
from selector.records import RunRecord

DEQUANTIZED_NOTE = (
    "The 'full precision' baselines of these models are dequantized GGUF weights "
    "(4/5-bit rounding already applied)."
)
CPU_NOTE = (
    "Latency and throughput were measured on CPU: CPU latency figures say little about GPU speed-ups "
    "(on CPU, int8 and 4-bit kernels are often no faster than bf16, while on a GPU they usually are)."
)


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
