"""One Hydra job = one variant, seen from the sweep: resume check, MLflow child run, isolated worker.

The worker (worker.py) does the expensive part in its own process; this side owns the MLflow child
run, so whatever happens to the worker (an exception, a segfault, an OOM kill, the time limit) the
run ends with a status, a reason and the log's last lines, and the sweep goes on.
"""

from __future__ import annotations

import codecs
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path
from typing import Any

from selector.config import SelectorConfig, to_dict
from selector.runner import JobFiles, VariantRun, now, partial_tasks
from selector.types import ErrorInfo, RunRecord, Variant

log = logging.getLogger("selector.job")
LOG_TAIL_LINES = 200  # a native crash prints a long module list after the useful lines


def record_store(cfg: SelectorConfig) -> Path:
    """Completed records by variant key: resume works without a tracker too."""
    return Path(cfg.output_dir) / "records"


def run_variant(cfg: SelectorConfig, key: str, job_dir: Path, extra_config: dict[str, Any],
                is_reference: bool = False) -> RunRecord:
    """Run the variant (in its own process unless cfg.isolate is false) and return its record."""
    files = JobFiles(job_dir)
    for stale in (files.record, files.tasks, files.stage):
        stale.unlink(missing_ok=True)
    if not cfg.isolate:
        record = VariantRun(cfg, key, job_dir, is_reference).run()
    else:
        record = _run_isolated(cfg, key, files, is_reference)
    record.config.update(extra_config)
    return record


def _run_isolated(cfg: SelectorConfig, key: str, files: JobFiles, is_reference: bool) -> RunRecord:
    spec = files.dir / "job.json"
    spec.write_text(json.dumps({"config": to_dict(cfg), "key": key, "job_dir": str(files.dir.resolve()),
                                "is_reference": is_reference}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "selector.worker", str(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # Ctrl-C reaches the sweep, which then stops the worker cleanly
        preexec_fn=_die_with_parent,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    tail = LogTail()
    tee = threading.Thread(target=_tee, args=(proc, files.log, tail), daemon=True)
    tee.start()
    timed_out = False
    try:
        proc.wait(timeout=cfg.time_limit_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill(proc)
    except BaseException:  # KeyboardInterrupt / SIGTERM: stop the worker before we go
        _kill(proc)
        raise
    finally:
        tee.join(timeout=10)
    if files.record.exists() and not timed_out and proc.returncode == 0:
        return RunRecord.load(files.record)
    return _crash_record(cfg, key, files, proc.returncode, timed_out, tail.text())


def _die_with_parent() -> None:
    """Linux: the worker is killed if the sweep dies (even by SIGKILL), so no orphan keeps running."""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class LogTail:
    """The worker output's last lines. Output arrives in chunks that split lines anywhere (a native
    crash writes its module list one name per write), so a line is kept only once it is complete."""

    def __init__(self, lines: int = LOG_TAIL_LINES, line_chars: int = 2000) -> None:
        self.lines: deque[str] = deque(maxlen=lines)
        self.partial, self.line_chars = "", line_chars
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a chunk can split a character

    def feed(self, chunk: bytes) -> None:
        text = self.partial + self.decoder.decode(chunk).replace("\r", "\n")
        *complete, self.partial = text.split("\n")
        self.lines.extend(line[: self.line_chars] + "\n" for line in complete if line.strip())
        self.partial = self.partial[-self.line_chars :]

    def text(self) -> str:
        return "".join(self.lines) + self.partial


def _tee(proc: subprocess.Popen, log_path: Path, tail: LogTail) -> None:  # type: ignore[type-arg]
    """Copy the worker's output to our stderr (progress bars stay live) and to worker.log."""
    assert proc.stdout is not None
    with log_path.open("ab") as out:
        for chunk in iter(lambda: proc.stdout.read1(65536), b""):  # type: ignore[union-attr]
            sys.stderr.buffer.write(chunk)
            sys.stderr.buffer.flush()
            out.write(chunk)
            out.flush()
            tail.feed(chunk)


def _kill(proc: subprocess.Popen) -> None:  # type: ignore[type-arg]
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _crash_record(cfg: SelectorConfig, key: str, files: JobFiles, code: int | None, timed_out: bool, tail: str) -> RunRecord:
    stage = files.read_stage()
    if timed_out:
        kind, why = "TimeLimitExceeded", f"time limit of {cfg.time_limit_s:g} s exceeded in stage {stage}"
    elif code is not None and code < 0:
        name = signal.Signals(-code).name
        hint = " (the kernel's out-of-memory killer sends this)" if -code == signal.SIGKILL else ""
        kind, why = "WorkerKilled", f"worker killed by {name}{hint} in stage {stage}"
    else:
        kind, why = "WorkerCrashed", f"worker exited with code {code} in stage {stage} without writing a record"
    variant = Variant(model=cfg.model.name, precision=cfg.precision.name, family=cfg.model.family,
                      params=int(cfg.model.params_b * 1e9))
    return RunRecord(
        key=key, variant=variant, status="failed", reason=why,
        error=ErrorInfo(type=kind, message=why, stage=stage, log_tail=tail[-12000:]),
        tasks=partial_tasks(files.dir), config=to_dict(cfg), started_at=now(), finished_at=now(),
    )

