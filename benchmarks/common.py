"""What both side-by-side benchmarks need: the machine they ran on, the peers' own virtual
environments, a worker subprocess in such an environment, selector's model loading, result files.

The peers (lm-eval, optimum-benchmark) pin libraries of their own, so each lives in its own venv
and runs as a worker script (benchmarks/*_worker.py) that reads a JSON spec and writes a JSON
answer; selector runs in this process. Both sides get the same torch thread count.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
REPO_ROOT = BENCH_DIR.parent
CONSTRAINTS = BENCH_DIR / "constraints-peers.txt"

# Each peer: (default venv folder, environment variable naming another, pip requirement, module to import).
PEERS = {
    "lm-eval": (".venv-lmeval", "SELECTOR_LMEVAL_VENV", "lm-eval[hf]==0.4.13", "lm_eval"),
    "optimum-benchmark": (".venv-optimum", "SELECTOR_OPTIMUM_BENCHMARK_VENV", "optimum-benchmark==0.6.0",
                          "optimum_benchmark"),
}


class BenchmarkError(RuntimeError):
    """A benchmark cannot run as asked (a missing peer venv, a worker that failed)."""


def peer_python(peer: str, venv: str | Path | None = None) -> Path:
    """The python of `peer`'s own venv: `venv` if given, else $SELECTOR_..._VENV, else benchmarks/.venv-*.
    Raises BenchmarkError with the commands that create it when it is missing."""
    folder, env_var, requirement, module = PEERS[peer]
    chosen = Path(venv or os.environ.get(env_var) or BENCH_DIR / folder)
    python = chosen / "bin" / "python"
    how = (f"create it with:\n  python3.11 -m venv {chosen}\n"
           f"  {python} -m pip install -c {CONSTRAINTS.relative_to(REPO_ROOT)} '{requirement}'\n"
           f"(the constraints pin torch==2.13.0 so pip takes the CPU wheel), or point {env_var} at one")
    if not python.is_file():
        raise BenchmarkError(f"no {peer} virtual environment at {chosen}: {how}")
    probe = subprocess.run([str(python), "-c", f"import {module}"], capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        raise BenchmarkError(f"{python} cannot import {module}: {probe.stderr.strip()[-500:]}\n{how}")
    return python


def peer_versions(python: Path, packages: list[str]) -> dict[str, str]:
    code = ("import json, importlib.metadata as m, platform\nout={'python': platform.python_version()}\n"
            f"for p in {packages!r}:\n"
            "    try: out[p]=m.version(p)\n    except m.PackageNotFoundError: pass\nprint(json.dumps(out))")
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout)


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def cpu_busy_cores(seconds: float = 15.0) -> float:
    """How many cores the whole machine kept busy over the next `seconds` (from /proc/stat), or -1
    where there is no /proc/stat. Catches a neighbour the 1-minute load average has not shown yet."""
    def sample() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields), idle

    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except OSError:
        return -1.0
    busy = 1 - (idle1 - idle0) / max(1, total1 - total0)
    return busy * (os.cpu_count() or 1)


class NeighbourCpu:
    """What other processes took from the machine while a benchmark ran: machine-wide busy CPU time
    (/proc/stat) minus this process's and its finished children's own (getrusage). Start it
    before the runs and read it after they end (workers are children that have finished by then)."""

    def __init__(self) -> None:
        self.start_wall = time.monotonic()
        self.start_busy = self._busy_s()
        self.start_ours = self._ours_s()

    @staticmethod
    def _busy_s() -> float:
        try:
            fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        except OSError:
            return float("nan")
        return (sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0)) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _ours_s() -> float:
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime

    def read(self) -> dict[str, float]:
        wall = time.monotonic() - self.start_wall
        busy, ours = self._busy_s() - self.start_busy, self._ours_s() - self.start_ours
        return {"wall_s": round(wall, 1), "machine_busy_cpu_s": round(busy, 1), "ours_cpu_s": round(ours, 1),
                "others_busy_cores": round(max(0.0, busy - ours) / wall, 2) if wall > 0 else 0.0}


def wait_for_quiet(max_load: float, timeout_s: float, max_busy_cores: float = 0.3) -> dict[str, Any]:
    """Wait (sleeping, not spinning) until the 1-minute load average is below max_load and the
    machine keeps fewer than max_busy_cores busy over 15 s, or timeout_s passes. Other work on a
    shared machine skews timings. Returns what it saw last and whether it gave up."""
    deadline = time.monotonic() + timeout_s
    while True:
        busy = cpu_busy_cores()
        quiet = os.getloadavg()[0] < max_load and busy < max_busy_cores
        if quiet or time.monotonic() >= deadline:
            return {"load_average": load_average(), "busy_cores": round(busy, 2), "quiet": quiet}
        time.sleep(15)


def machine(threads: int) -> dict[str, Any]:
    """The machine a result was measured on, as the report's header shows it."""
    import torch

    from selector.measure.environment import environment

    env = environment("cpu")
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "cpu": env["cpu"],
        "cores": env["cpu_count"],
        "cpu_affinity": env["cpu_affinity"],
        "ram_gb": env["ram_gb"],
        "torch_threads": threads,
        "torch_threads_seen": torch.get_num_threads(),
        "platform": env["platform"],
        "load_average_start": load_average(),
        "versions": env["versions"],
        "commit": env["commit"],
    }


def machine_lines(data: dict[str, Any], threads: str) -> list[str]:
    """The results page's lines on the machine it ran on: CPU, cores, `threads` (what they were
    for), the load before and after, what other processes kept busy, and the quiet check."""
    m = data["machine"]
    return [f"- machine: {m.get('cpu', '')}, {m.get('cores', '')} cores, {threads}; load average "
            f"{data['load_before']} before, {data['load_after']} after; other processes kept "
            f"{data['neighbours']['others_busy_cores']} cores busy on average while it ran",
            f"- quiet check before measuring: {m.get('quiet_check', 'not asked (--max-load)')}"]


def machine_when_quiet(threads: int, max_load: float | None, wait_s: float) -> dict[str, Any]:
    """Wait for a quiet machine when `max_load` is given, then describe it (with the quiet check)."""
    quiet = None
    if max_load is not None:
        say(f"waiting for the load average to fall below {max_load} (now {load_average()}) ...")
        quiet = wait_for_quiet(max_load, wait_s)
        say(f"  {quiet}")
    info = machine(threads)
    if quiet is not None:
        info["quiet_check"] = quiet
    return info


def worker_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
                "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                "PYTHONUNBUFFERED": "1"})
    return env


def run_worker(python: Path, script: str, spec: dict[str, Any], threads: int, timeout_s: float,
               log: Path | None = None) -> dict[str, Any]:
    """Run benchmarks/<script> under `python` with `spec`; its JSON answer, plus the process's own
    wall time and CPU seconds (user + system, from the kernel's accounting of finished children)."""
    with tempfile.TemporaryDirectory(prefix="selector-bench-") as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        try:
            done = subprocess.run([str(python), str(BENCH_DIR / script), str(spec_path), str(out_path)],
                                  capture_output=True, text=True, timeout=timeout_s, env=worker_env(threads),
                                  cwd=tmp)
        except subprocess.TimeoutExpired as e:
            raise BenchmarkError(f"{script} ran past {timeout_s:.0f} s") from e
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(done.stdout + "\n--- stderr ---\n" + done.stderr, encoding="utf-8")
        if done.returncode != 0 or not out_path.is_file():
            raise BenchmarkError(f"{script} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
        answer = json.loads(out_path.read_text(encoding="utf-8"))
    answer["process_wall_s"] = wall
    answer["process_cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return answer


def compose(model: str, precision: str) -> Any:
    """selector's validated config for this model and precision, composed as a sweep composes it."""
    from selector.compose import compose as compose_config

    return compose_config([f"model={model}", f"precision={precision}"])


def load_selector_model(cfg: Any) -> tuple[Any, Any, float]:
    """(resolved source, loaded model, load seconds), loaded the way a selector run loads it."""
    from selector import models
    from selector.precisions import load_variant

    models.resolve(cfg.model, Path(cfg.cache_dir), precision=cfg.precision.name, dtype=cfg.precision.dtype,
                   progress=False)  # not timed
    start = time.perf_counter()
    resolved, loaded = load_variant(cfg.model, cfg.precision, cfg.cache_dir, "cpu", calibration=cfg.calibration,
                                    progress=False)
    return resolved, loaded, time.perf_counter() - start


def write_results(stem: str, data: dict[str, Any], markdown: str, out_dir: Path = RESULTS_DIR,
                  cache_dir: str | None = None) -> tuple[Path, Path]:
    """benchmarks/results/<stem>.json and .md (the latest run of this benchmark and model)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    json_path.write_text(redact(json.dumps(data, indent=1, ensure_ascii=False, default=str), cache_dir) + "\n",
                         encoding="utf-8")
    md_path.write_text(redact(markdown, cache_dir), encoding="utf-8")
    return json_path, md_path


def redact(text: str, cache_dir: str | None = None) -> str:
    """Results are committed: local paths become the repo-relative, <cache_dir> or ~ form."""
    if cache_dir:
        text = text.replace(str(Path(cache_dir).resolve()), "<cache_dir>").replace(str(cache_dir), "<cache_dir>")
    return text.replace(str(REPO_ROOT) + "/", "").replace(str(Path.home()), "~")


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_sweep(overrides: list[str], out: Path) -> tuple[float, Path, str]:
    """`python -m selector output_dir=<out> <overrides>` from the repository root, its log in
    out/sweep.log: (wall seconds, the sweep's folder, what it printed). Exits naming the log if it fails."""
    cmd = [sys.executable, "-m", "selector", f"output_dir={out}", *overrides]
    out.mkdir(parents=True, exist_ok=True)
    log = out / "sweep.log"
    t0 = time.monotonic()
    with log.open("w") as sink:
        done = subprocess.run(cmd, cwd=Path(__file__).resolve().parent.parent, stdout=subprocess.PIPE, stderr=sink,
                              text=True, env={**os.environ})
    wall = time.monotonic() - t0
    if done.returncode != 0:
        raise SystemExit(f"sweep failed ({done.returncode}); see {log}:\n{log.read_text()[-3000:]}")
    [sweep] = sorted((out / "sweeps").iterdir(), key=lambda p: p.stat().st_mtime)[-1:]
    return wall, sweep, done.stdout
