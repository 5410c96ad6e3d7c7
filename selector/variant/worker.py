"""The variant's own process: `python -m selector.variant.worker <job folder>/job.json`.

One process per variant returns all its memory when it ends, and a segfault, a CUDA error or an
out-of-memory kill there cannot take the sweep down: the sweep's side (supervise.py) sees the exit
status and records the failure with the stage the worker had reached.

To debug one variant in the foreground (a debugger, a profiler), run this module yourself on the
job.json a sweep left in the variant's folder.
"""

from __future__ import annotations

import faulthandler
import logging
import resource
import signal
import sys
from pathlib import Path

from selector.processes import skip_exit_collection


def limit_memory(gb: float | None) -> None:
    """Cap the address space so runaway allocation fails inside the variant, not the machine."""
    if gb:
        cap = int(gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def interrupt_on_sigterm() -> None:
    """The sweep stops a worker with SIGTERM (Ctrl-C, its time limit): raise KeyboardInterrupt
    instead of dying at once, so the variant's cleanup runs (above all: stopping a model server it
    started, which lives in a process group of its own) and its record says where it stopped."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)


def main(argv: list[str]) -> int:
    from selector.logs import setup_logging
    from selector.variant.jobfiles import read_job
    from selector.variant.run import run_here

    setup_logging()
    interrupt_on_sigterm()
    faulthandler.enable()  # a segfault prints the Python stack to stderr (captured into worker.log)
    job = read_job(Path(argv[0]))
    limit_memory(job.config.get("memory_limit_gb"))
    record = run_here(job)  # what selector.evaluate runs in the caller's process
    logging.getLogger("selector.variant.worker").info("variant %s: %s", record.name, record.status)
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    skip_exit_collection()
    sys.exit(code)
