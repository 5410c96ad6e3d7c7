"""Compare two folders of sweep outputs field by field: did a change keep selector's behaviour?

Usage:
    python scripts/compare_records.py BEFORE AFTER [--list-equal] [--max N]

BEFORE and AFTER are folders holding sweep outputs: a sweep's output_dir, or a folder of them
(scripts/behaviour_sweeps.py writes OUT/hf, OUT/scripted, OUT/vllm). Under each output_dir the
latest sweep folder (sweeps/<time>/) is read: every variant's record.json (paired by output folder
and variant name), its samples.jsonl and samples.in_process.jsonl (paired by task/id), the sweep's
state (sweep.json) and its report's selection and context (report/report.json; its "records" are
the record.json files again and are skipped).

Every leaf is compared after PLACEHOLDERS below (each side's own folder, sweep time stamps, temporary
folders, the checkout's venv, a server's port) are put in. A field is DETERMINISTIC (must be equal)
unless its path matches a MEASURED pattern (timings, rates, memory peaks, environment, run ids):
those are compared for presence and type only (a measured dict or list as a whole). Prints the
differences and a summary; exit 1 if any field differs (a deterministic value, or a measured field
missing or of another type), or if a variant, a sample or a document is on one side only.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import sqlite3
import sys
from pathlib import Path
from typing import Any

# Paths are dotted, list items by index ("perf.load.0.e2e_ms.p50"). A pattern is fnmatch ("*" also
# spans dots) against "<document kind>:<path>" (kinds: record, samples, sweep, report, mlflow) and
# covers the subtree below what it matches. Whatever no pattern matches is DETERMINISTIC: accuracies,
# per-item scores and answers, keys, statuses and reasons, model/precision/kernel/quantization
# facts, counted bytes (weights, artifacts, the KV pool), fidelity, the search's decisions, the
# verdicts and the winner, MLflow params and tags, the load levels' requests and answers.
MEASURED: list[str] = [
    # when, where and on what it ran; run ids
    "*started_at", "*finished_at", "*created_at", "*mlflow_run_id", "*parent_run_id",
    "record:environment", "record:timings_s", "report:context.environment", "report:context.wall_time_s",
    # latency and throughput (their shapes and counts stay deterministic)
    "record:perf.latency.*_ms", "record:perf.throughput.*.*_per_s", "record:perf.throughput.*.wall_s",
    "record:perf.compile_s", "record:perf.capacity*",
    # a load level's timing, rates and utilisation (what it sent, and its answers, stay deterministic)
    "record:perf.load.*.*_ms", "record:perf.load.*.*_s", "record:perf.load.*.*_pct",
    "record:perf.load.*.request_throughput", "record:perf.load.*.goodput_rps", "record:perf.load.*.gpu_mem_bytes",
    # memory peaks; plan's serving estimate adds the worker's measured runtime RSS (sweep/pipeline.py)
    "record:memory.serving", "record:memory.load", "record:memory.prepare", "record:memory.footprint",
    "record:memory.*rss_bytes", "record:memory.cuda_*", "record:memory.kv_peak_bytes",
    "record:memory.planned_serving_bytes",
    # a server's start time; how long quantizing took; a failure's log
    "record:serving.start_s", "record:quant.quantize_s", "record:error.log_tail",
    # the search's seconds (sweep.json, the report's context)
    "sweep:search.wall_s", "sweep:search.waves.*.wall_s",
    "report:context.search.wall_s", "report:context.search.waves.*.wall_s", "report:context.search.savings.*_s",
    # the latency Pareto front is drawn from measured latencies
    "report:selection.pareto.latency",
    # MLflow: the same figures as metrics, the sweep run's name (its start time), the parent's id
    "mlflow:metrics.latency/*", "mlflow:metrics.throughput/*", "mlflow:metrics.time/*", "mlflow:metrics.quant/time_s",
    "mlflow:metrics.load/*_ms_*", "mlflow:metrics.load/*_share", "mlflow:metrics.load/*_pct",
    "mlflow:metrics.load/output_tokens_per_s", "mlflow:metrics.load/request_throughput",
    "mlflow:metrics.memory/*rss_gb", "mlflow:metrics.memory/planned_serving_gb",
    "mlflow:metrics.sweep/wall_s", "mlflow:metrics.sweep/*rss_gb", "mlflow:metrics.search/*_s",
    "mlflow:tags.mlflow.runName", "mlflow:tags.mlflow.parentRunId",
]
_MEASURED = re.compile("|".join(fnmatch.translate(p) for p in MEASURED))

# What differs between two runs in strings of any field, put as placeholders before comparing.
PLACEHOLDERS: list[tuple[str, str]] = [
    (r"sweeps/\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d-\d+", "sweeps/<time>"),  # a sweep folder's name
    (r"/tmp/selector-sandbox-\w+", "/tmp/selector-sandbox-<tmp>"),  # the code task's sandbox
    (r"(?<![\w/])/\S*?/(\.venv[\w-]*)/", r"<repo>/\1/"),  # a venv's python (the checkout's folder)
    (r"other processes took \d+% of the \d+ cores meanwhile( \(busy[^)]*\))?",
     "other processes took <measured> of the cores meanwhile"),
]


def classify(kind: str, path: str) -> str:
    """measured when a MEASURED pattern matches the path or one of its ancestors, else deterministic."""
    parts = path.split(".")
    return "measured" if any(_MEASURED.match(f"{kind}:{'.'.join(parts[:i])}")
                             for i in range(len(parts), 0, -1)) else "deterministic"


def normalise(value: Any, roots: list[str]) -> Any:
    """This side's root folder(s) as <root>, PLACEHOLDERS applied, a server's --port value as <port>."""
    if isinstance(value, str):
        for root in roots:
            value = value.replace(root, "<root>")
        for pattern, placeholder in PLACEHOLDERS:
            value = re.sub(pattern, placeholder, value)
        return value
    if isinstance(value, dict):
        return {k: normalise(v, roots) for k, v in value.items()}
    if isinstance(value, list):
        items = [normalise(v, roots) for v in value]
        return [("<port>" if i and items[i - 1] == "--port" else v) for i, v in enumerate(items)]
    return value


def jsonl(path: Path) -> dict[str, Any]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {f"{r.get('task')}/{r.get('id')}": r for r in rows}


def mlflow_runs(db: Path) -> dict[str, dict[str, Any]]:
    """Each run of a local MLflow store (sqlite, read-only): the sweep's own run as "sweep run", each
    variant's by its name; {"params", "tags", "metrics"} (the latest value of each metric)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        runs: dict[str, dict[str, Any]] = {}
        for run_id, name in con.execute("SELECT run_uuid, name FROM runs WHERE lifecycle_stage = 'active'"):
            run = {table: dict(con.execute(f"SELECT key, value FROM {table} WHERE run_uuid = ?", (run_id,)))
                   for table in ("params", "tags", "latest_metrics")}
            run["metrics"] = run.pop("latest_metrics")
            runs["sweep run" if run["tags"].get("selector.role") == "sweep" else f"run {name}"] = run
        return runs
    finally:
        con.close()


def documents(root: Path) -> dict[str, tuple[str, Any]]:
    """name -> (kind, normalised JSON) for every sweep output under root (the latest sweep of each)."""
    root = root.resolve()
    docs: dict[str, tuple[str, Any]] = {}
    roots = {str(root)}  # the folder, and where its sweeps ran (as their config says) if it moved since
    for sweeps in sorted(root.rglob("sweeps")):
        stamped = sorted(p for p in sweeps.iterdir() if (p / "sweep.json").is_file()) if sweeps.is_dir() else []
        if not stamped:
            continue
        sweep, group = stamped[-1], sweeps.parent.relative_to(root).as_posix()
        if len(stamped) > 1:
            print(f"note: {sweeps} holds {len(stamped)} sweeps; reading the latest, {sweep.name}")
        state = json.loads((sweep / "sweep.json").read_text())
        docs[f"{group}: sweep.json"] = ("sweep", state)
        ran_in, suffix = str((state.get("config") or {}).get("output_dir", "")), "" if group == "." else "/" + group
        if ran_in.startswith("/") and ran_in.endswith(suffix):
            roots.add(ran_in[:len(ran_in) - len(suffix)])
        if (sweeps.parent / "mlflow.db").is_file():
            for run, data in mlflow_runs(sweeps.parent / "mlflow.db").items():
                docs[f"{group}: mlflow {run}"] = ("mlflow", data)
        report = sweep / "report" / "report.json"
        if report.is_file():
            data = json.loads(report.read_text())
            docs[f"{group}: report"] = ("report", {k: v for k, v in data.items() if k != "records"})
        for path in sorted(sweep.rglob("record.json")):
            record = json.loads(path.read_text())
            variant = record["variant"]
            setting = ", ".join(f"{k}={v}" for k, v in variant.get("setting", {}).items())
            name = f"{group}: {variant['model']}/{variant['precision']}" + (f" [{setting}]" if setting else "")
            docs[name] = ("record", record)
            for samples in ("samples.jsonl", "samples.in_process.jsonl"):
                if (path.parent / samples).is_file():
                    docs[f"{name} {samples}"] = ("samples", jsonl(path.parent / samples))
    return {name: (kind, normalise(doc, sorted(roots, key=len, reverse=True))) for name, (kind, doc) in docs.items()}


def json_type(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return type(value).__name__
    return "number" if isinstance(value, (int, float)) else type(value).__name__


class Comparison:
    def __init__(self) -> None:
        self.equal: list[str] = []
        self.measured: list[str] = []
        self.different: list[str] = []

    def leaf(self, where: str, kind: str, path: str, a: Any, b: Any) -> None:
        if classify(kind, path) == "measured":
            if json_type(a) == json_type(b):
                self.measured.append(where)
            else:
                self.different.append(f"{where}: measured, type {json_type(a)} -> {json_type(b)}")
        elif a == b and json_type(a) == json_type(b):
            self.equal.append(where)
        else:
            self.different.append(f"{where}: {short(a)} -> {short(b)}")

    def walk(self, doc: str, kind: str, path: str, a: Any, b: Any) -> None:
        where = f"{doc} :: {path or '.'}"
        if classify(kind, path) == "measured" or not (
                (isinstance(a, dict) and isinstance(b, dict)) or (isinstance(a, list) and isinstance(b, list))):
            self.leaf(where, kind, path, a, b)
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b)):
                sub = f"{path}.{key}" if path else str(key)
                if key not in a or key not in b:
                    self.different.append(f"{doc} :: {sub}: only {'after' if key in b else 'before'}: "
                                          f"{short(b.get(key) if key in b else a.get(key))}")
                else:
                    self.walk(doc, kind, sub, a[key], b[key])
            return
        assert isinstance(a, list) and isinstance(b, list)
        if len(a) != len(b):
            self.different.append(f"{where}: {len(a)} items -> {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            self.walk(doc, kind, f"{path}.{i}" if path else str(i), x, y)


def short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[:limit] + "..."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--list-equal", action="store_true", help="also list the equal and measured fields")
    parser.add_argument("--max", type=int, default=200, help="differences listed at most (default %(default)s)")
    args = parser.parse_args(argv)
    before, after = documents(args.before), documents(args.after)
    if not before or not after:
        print(f"no sweep found under {args.before if not before else args.after}", file=sys.stderr)
        return 2
    result = Comparison()
    for name in sorted(set(before) | set(after)):
        if name not in before or name not in after:
            result.different.append(f"{name}: only {'after' if name in after else 'before'}")
            continue
        kind, a = before[name]
        result.walk(name, kind, "", a, after[name][1])
    if args.list_equal:
        print("\n".join(["equal:", *result.equal, "", "measured only:", *result.measured, ""]))
    if result.different:
        print(f"different ({len(result.different)}):")
        print("\n".join(f"  {line}" for line in result.different[:args.max]))
        if len(result.different) > args.max:
            print(f"  ... {len(result.different) - args.max} more")
    print(f"{len(before)} documents before, {len(after)} after: {len(result.equal)} fields equal, "
          f"{len(result.measured)} measured-only, {len(result.different)} different")
    return 1 if result.different else 0


if __name__ == "__main__":
    sys.exit(main())
