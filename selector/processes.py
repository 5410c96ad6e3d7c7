"""Child processes that cannot outlive what started them: the variant's worker and a model server.

Both are started in a session of their own (so Ctrl-C reaches the sweep, which then stops them
in order) and asked by the kernel to die with their parent (Linux PR_SET_PDEATHSIG), so a killed
sweep leaves nothing running; both are stopped as a whole process group.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

log = logging.getLogger("selector.processes")


def die_with_parent(sig: signal.Signals = signal.SIGKILL) -> Callable[[], None]:
    """A preexec_fn: the child gets `sig` when the process that started it dies (even by SIGKILL).
    Linux ties this to the thread that started the child: start it from a thread that lives as
    long as the child should."""

    def arm() -> None:
        if sys.platform.startswith("linux"):
            import ctypes

            PR_SET_PDEATHSIG = 1
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, sig)

    return arm


def skip_exit_collection() -> None:
    """Called as one of selector's own processes ends (the command, a variant's worker, its
    preparation): the interpreter's last garbage collections would walk every object torch,
    transformers or MLflow created, about 1.3 s of every process on 2 cores, only to free memory the
    OS takes back anyway. atexit handlers, buffered streams and logging are still flushed and closed;
    only garbage in reference cycles is left to the OS. Never in a process that goes on (a test, a
    notebook calling selector.run): it would keep everything allocated so far."""
    gc.freeze()


def signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Send `sig` to a process group; False when it is already gone."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False


def stop_group(proc: subprocess.Popen, grace_s: float = 10.0) -> None:  # type: ignore[type-arg]
    """SIGTERM the child's process group, then SIGKILL it if it is still there after grace_s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not signal_group(proc.pid, sig):
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
            return


def reap_servers(job_dir: Path) -> list[int]:
    """SIGKILL the process group of every server a worker left running in job_dir (its *.pgid
    files): the worker was killed, or died, before it could stop them. Returns the groups killed."""
    killed = []
    for f in Path(job_dir).glob("*.pgid"):
        with contextlib.suppress(ValueError, OSError):
            pgid = int(f.read_text().strip())
            if signal_group(pgid, signal.SIGKILL):
                killed.append(pgid)
                log.warning("killed server process group %d, left running by the variant's worker", pgid)
        f.unlink(missing_ok=True)
    return killed
