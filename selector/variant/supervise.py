"""Supervision of one variant's worker process: start it, relay its output, enforce the time limit,
and turn whatever becomes of it into a record.

The worker (worker.py) does the expensive part in its own process; the sweep's side owns the
MLflow child run, so whatever happens to the worker (an exception, a segfault, an OOM kill, the
time limit) the run ends with a status, a reason and the log's last lines, and the sweep goes on.
"""

from __future__ import annotations

import codecs
import io
import logging
import os
import re
import signal
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path
from typing import Any, cast

from selector.config import SelectorConfig, to_dict
from selector.processes import reap_servers
from selector.processes import die_with_parent, stop_group
from selector.variant.jobfiles import Job, JobFiles, bare_record
from selector.records import ErrorInfo, RunRecord

log = logging.getLogger("selector.variant.supervise")
LOG_TAIL_LINES = 200  # a native crash prints a long module list after the useful lines
FAILURE_TAIL_LINES = 25  # shown on the console when a variant fails (all of them are in its record)


def record_store(cfg: SelectorConfig) -> Path:
    """Completed records by variant key: resume works without a tracker too."""
    return Path(cfg.output_dir) / "records"


def run_variant(cfg: SelectorConfig, key: str, evaluation_key: str, job_dir: Path, extra_config: dict[str, Any],
                is_reference: bool = False, baseline: dict[str, Any] | None = None,
                reference_key: str | None = None) -> RunRecord:
    """Run the variant in its own worker process and return its record (a failed one when the
    worker dies, hangs past the time limit or exits without writing one)."""
    files = JobFiles(job_dir)
    files.clear()
    spec = files.write_job(Job(to_dict(cfg), key, evaluation_key, files.dir, is_reference, baseline, reference_key))
    proc = subprocess.Popen(
        [sys.executable, "-m", "selector.variant.worker", str(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # Ctrl-C reaches the sweep, which then stops the worker cleanly
        preexec_fn=die_with_parent(),  # nothing keeps running if the sweep is killed
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    tail = LogTail()
    console = None if cfg.verbose else ConsoleFilter()
    tee = threading.Thread(target=_tee, args=(proc, files.log, tail, console), daemon=True)
    tee.start()
    timed_out = False
    try:
        proc.wait(timeout=cfg.time_limit_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        stop_group(proc)
    except BaseException:  # KeyboardInterrupt / SIGTERM: stop the worker before we go
        stop_group(proc)
        raise
    finally:
        tee.join(timeout=10)
        reap_servers(files.dir)  # a model server the worker started and could not stop
    if files.record.exists() and not timed_out and proc.returncode == 0:
        record = RunRecord.load(files.record)
    else:
        record = _crash_record(cfg, key, files, proc.returncode, timed_out, tail.text())
    if record.status == "failed" and console is not None:  # what the console left out, where it matters
        last = "".join(list(tail.lines)[-FAILURE_TAIL_LINES:])
        log.error("%s failed; the last lines of %s:\n%s", record.name, files.log, last.rstrip())
    record.config.update(extra_config)
    return record


class ConsoleFilter:
    """Which of the worker's output reaches the console: selector's own log lines and its evaluation
    bar. Libraries' output (gptqmodel's tables, loading bars, per-layer messages: thousands of lines
    on a cold sweep) stays in worker.log; `verbose=true` shows it all."""

    OWN_LINE = re.compile(r"^\[[^\]]*\]\[selector[.\]]")
    OWN_BAR = "evaluate "  # the tqdm bar the worker draws while scoring items (pipeline.py)

    def __init__(self) -> None:
        self.partial = ""
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, chunk: bytes) -> str:
        """The part of `chunk` to show, with the terminators that keep a bar drawing in place."""
        text = self.partial + self.decoder.decode(chunk)
        pieces = re.split(r"([\r\n])", text)
        self.partial = pieces.pop()  # no terminator yet
        shown = []
        for piece, end in zip(pieces[0::2], pieces[1::2]):
            if self.OWN_LINE.match(piece) or piece.lstrip().startswith(self.OWN_BAR):
                shown.append(piece + end)
        return "".join(shown)


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


def _tee(proc: subprocess.Popen[bytes], log_path: Path, tail: LogTail,
         console: ConsoleFilter | None) -> None:
    """Copy the worker's output to worker.log and to our stderr: all of it (progress bars stay
    live), or what `console` lets through."""
    stdout = cast("io.BufferedReader", proc.stdout)  # stdout=PIPE with the default bufsize: a buffered reader
    assert stdout is not None
    with log_path.open("ab") as out:
        for chunk in iter(lambda: stdout.read1(65536), b""):
            shown = chunk if console is None else console.feed(chunk).encode()
            if shown:
                sys.stderr.buffer.write(shown)
                sys.stderr.buffer.flush()
            out.write(chunk)
            out.flush()
            tail.feed(chunk)


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
    return bare_record(cfg, key, "failed", why, error=ErrorInfo(type=kind, message=why, stage=stage, log_tail=tail[-12000:]),
                       tasks=files.partial_tasks(),
                       preparation="none" if stage == "preflight" else "")  # later: whether it prepared is unknown

