"""What the code sandbox costs per item: the default eval set's 42 reference solutions and their
asserts, run the way the `code_tests` metric runs them, through each of

- `bare`: `python -I main.py` in a fresh temporary folder, no limits, with the interpreter the
  sandbox uses (what the code itself takes);
- `before`: selector/tasks/sandbox.py as of `--baseline REV` (taken from git, loaded as a module);
- `after`: selector/tasks/sandbox.py of this checkout;
- `after_polling`: the same, but waiting for the program by sleep-polling as `before` did (the
  pidfd wait came with the namespace layers): what the layers alone cost.

Each round runs every item through all configurations back to back, in a rotating order, so on
a shared machine they see the same load; `*_minus_before_paired` compares them item by item. Times are wall-clock around each call, so they include starting
the wrappers, writing the script and removing its folder. Every gold solution must pass in every
configuration, else the figures would time failures.

    python -m benchmarks.sandbox_overhead --baseline 2a24c35 --rounds 10 --max-load 1.0

Writes benchmarks/results/sandbox_overhead.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks.common import REPO_ROOT, RESULTS_DIR, NeighbourCpu, load_average, redact, say, wait_for_quiet
from selector.paths import DEFAULT_EVALSET

EVALSET = DEFAULT_EVALSET


def code_items() -> tuple[list[str], dict[str, Any]]:
    """The programs the metric would run for gold answers (solution + tests) and the task's metric args."""
    from selector.tasks import load_evalset

    (task,) = load_evalset(EVALSET, ["code"])
    programs = [item.fields["solution"] + "\n\n" + item.fields[task.metric_args["tests_field"]] for item in task.items]
    return programs, dict(task.metric_args)


def module_at(rev: str) -> ModuleType:
    """selector/tasks/sandbox.py as it was at `rev`, imported under another name (it needs only the stdlib)."""
    source = subprocess.run(["git", "-C", str(REPO_ROOT), "show", f"{rev}:selector/tasks/sandbox.py"],
                            capture_output=True, text=True, check=True).stdout
    folder = Path(tempfile.mkdtemp(prefix="sandbox-before-"))
    path = folder / "sandbox_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("sandbox_before", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    shutil.rmtree(folder)
    return module


def bare(code: str, interpreter: str, timeout_s: float) -> bool:
    folder = Path(tempfile.mkdtemp(prefix="bare-"))
    try:
        (folder / "main.py").write_text(code)
        done = subprocess.run([interpreter, "-I", "main.py"], cwd=folder, stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=timeout_s)
        return done.returncode == 0
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def polling(sandbox: ModuleType, run: Callable[[str], bool], code: str) -> bool:
    """`after`, but waiting by sleep-polling as `before` did: what the new layers cost on their own."""
    waiting = sandbox._wait_without_reaping
    sandbox._wait_without_reaping = sandbox._poll_without_reaping
    try:
        return run(code)
    finally:
        sandbox._wait_without_reaping = waiting


def summary(times_ms: list[float]) -> dict[str, float]:
    ordered = sorted(times_ms)
    return {"mean_ms": round(statistics.fmean(ordered), 2), "median_ms": round(statistics.median(ordered), 2),
            "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))], 2), "min_ms": round(ordered[0], 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", help="git revision whose selector/tasks/sandbox.py is `before` (default: none)")
    parser.add_argument("--rounds", type=int, default=5, help="times each item runs in each configuration")
    parser.add_argument("--max-load", type=float, help="first wait until the 1-minute load average is below this")
    parser.add_argument("--wait-s", type=float, default=900, help="how long --max-load waits at most")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "sandbox_overhead.json")
    args = parser.parse_args(argv)

    from selector.tasks import sandbox

    programs, metric_args = code_items()
    timeout_s, memory_mb = float(metric_args["timeout_s"]), int(metric_args["memory_mb"])
    runners: dict[str, Callable[[str], bool]] = {}
    isolation: dict[str, list[str]] = {}
    probe_ms: dict[str, float] = {}
    modules = {"after": sandbox}
    if args.baseline:
        modules = {"before": module_at(args.baseline), **modules}
    for name, module in modules.items():
        started = time.perf_counter()
        isolation[name] = list(module.isolation())  # the first call probes the machine: timed apart
        probe_ms[name] = round((time.perf_counter() - started) * 1000, 1)
        runners[name] = (lambda m: lambda code: m.run_python(code, timeout_s=timeout_s, memory_mb=memory_mb).passed)(module)
    runners["after_polling"] = lambda code: polling(sandbox, runners["after"], code)
    interpreter = sandbox._setup().interpreter  # the Python the sandbox runs (as root: one `nobody` can run)
    runners = {"bare": lambda code: bare(code, interpreter, timeout_s), **runners}

    times: dict[str, list[float]] = {name: [] for name in runners}
    failed: dict[str, int] = {name: 0 for name in runners}
    names = list(runners)
    quiet = wait_for_quiet(args.max_load, args.wait_s) if args.max_load else None
    neighbours = NeighbourCpu()
    load_start = load_average()
    for round_ in range(args.rounds):
        for i, code in enumerate(programs):
            # each item through every configuration back to back, in a rotating order: they see the same load
            shift = (round_ + i) % len(names)
            for name in names[shift:] + names[:shift]:
                started = time.perf_counter()
                ok = runners[name](code)
                times[name].append((time.perf_counter() - started) * 1000)
                failed[name] += not ok
        say(f"round {round_ + 1}/{args.rounds}: " + ", ".join(
            f"{n} {statistics.median(times[n][-len(programs):]):.1f} ms" for n in names))
    if any(failed.values()):
        say(f"gold solutions failed: {failed}")
        return 1

    figures = {name: summary(times[name]) for name in names}
    overhead = {name: {k: round(figures[name][k] - figures["bare"][k], 2) for k in ("mean_ms", "median_ms")}
                for name in names if name != "bare"}
    for name in names:  # against `before`, item by item: the same item in the same round, run moments apart
        if name not in ("bare", "before") and "before" in times:
            paired = [a - b for a, b in zip(times[name], times["before"])]
            overhead[f"{name}_minus_before_paired"] = {"mean_ms": round(statistics.fmean(paired), 2),
                                                       "median_ms": round(statistics.median(paired), 2)}
    result: dict[str, Any] = {
        "what": "wall-clock ms per code item (gold solution + its asserts) through each configuration",
        "items": len(programs), "rounds": args.rounds, "timeout_s": timeout_s, "memory_mb": memory_mb,
        "baseline_rev": args.baseline, "commit": _commit(), "interpreter": interpreter,
        "per_item": figures,
        "sandbox_overhead_vs_bare": overhead,
        "isolation": isolation,
        "first_call_probe_ms": probe_ms,
        "machine": {"platform": platform.platform(), "cores": os.cpu_count(), "running_as_root": os.geteuid() == 0,
                    "quiet_wait": quiet, "load_average_start": load_start, "load_average_end": load_average(),
                    "neighbours": neighbours.read()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(redact(json.dumps(result, indent=1)) + "\n", encoding="utf-8")
    say(json.dumps({"per_item": figures, "overhead_vs_bare": overhead}, indent=1))
    say(f"wrote {redact(str(args.out))}")
    return 0


def _commit() -> str:
    done = subprocess.run(["git", "-C", str(REPO_ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True)
    return done.stdout.strip()


if __name__ == "__main__":
    sys.exit(main())
