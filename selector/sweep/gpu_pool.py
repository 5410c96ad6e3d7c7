"""One GPU per variant when Hydra's joblib launcher runs several variants at once on one machine.

`hydra/launcher=joblib_gpus` adds `GpuPoolCallback`. Before each job it takes a free GPU from the
pool (a lock file per GPU under the sweep folder, so the claim holds across joblib's worker
processes) and sets CUDA_VISIBLE_DEVICES to it; the variant's worker subprocess (job.py) inherits
that and sees its GPU as cuda:0. The job number picks where the search starts (job % GPUs), but a
busy GPU is skipped: "job number modulo GPU count" alone would put two jobs on one GPU as soon as
variants take unequal time. The lock is released when the job ends (or its process dies).

The pool is SELECTOR_GPUS (e.g. "0,1,3"), else CUDA_VISIBLE_DEVICES, else every GPU torch sees.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger("selector.sweep.gpu_pool")
POOL_ENV = "SELECTOR_GPUS"
POLL_S = 2.0


def visible_gpus() -> list[str]:
    """The GPU ids variants may use, as CUDA_VISIBLE_DEVICES would name them."""
    for var in (POOL_ENV, "CUDA_VISIBLE_DEVICES"):
        listed = [g.strip() for g in os.environ.get(var, "").split(",") if g.strip()]
        if listed:
            return listed
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except ImportError:
        return []


def gpu_count() -> int:
    """How many variants to run at once: one per GPU (at least one, so a CPU box still runs)."""
    return max(1, len(visible_gpus()))


# `${selector_gpu_count:}` in conf/hydra/launcher/joblib_gpus.yaml. Hydra instantiates callbacks
# (importing this module) before it builds the launcher, so the resolver exists when n_jobs resolves.
if not OmegaConf.has_resolver("selector_gpu_count"):
    OmegaConf.register_new_resolver("selector_gpu_count", gpu_count)


class GpuPool:
    """Exclusive claims on GPUs through one lock file each, shared by every process on the machine."""

    def __init__(self, lock_dir: Path, gpus: list[str]) -> None:
        if not gpus:
            raise ValueError("the GPU pool is empty: set SELECTOR_GPUS or CUDA_VISIBLE_DEVICES")
        self.lock_dir, self.gpus = Path(lock_dir), list(gpus)
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        self._held: Any = None

    def acquire(self, job_num: int, timeout_s: float | None = None) -> str:
        """A free GPU, trying job_num % len(gpus) first; waits while every GPU is taken."""
        from filelock import FileLock, Timeout

        order = [self.gpus[(job_num + k) % len(self.gpus)] for k in range(len(self.gpus))]
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        waited = False
        while True:
            for gpu in order:
                lock = FileLock(str(self.lock_dir / f"gpu-{gpu}.lock"))
                try:
                    lock.acquire(timeout=0)
                except Timeout:
                    continue
                self._held = lock
                return gpu
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"no free GPU among {', '.join(self.gpus)} within {timeout_s} s")
            if not waited:
                log.info("every GPU of %s is busy; waiting for one", ",".join(self.gpus))
                waited = True
            time.sleep(POLL_S)

    def release(self) -> None:
        if self._held is not None:
            self._held.release()
            self._held = None


class GpuPoolCallback(Callback):
    def __init__(self, lock_dir: str | None = None) -> None:
        # Read once, in the launching process: a joblib worker's own CUDA_VISIBLE_DEVICES was
        # narrowed to one GPU by the job it ran before, so workers use this copy (pickled with us).
        self.gpus = visible_gpus()
        self.lock_dir = lock_dir
        self.pool: GpuPool | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        n_jobs = OmegaConf.select(config, "hydra.launcher.n_jobs")
        if self.gpus:
            log.info("GPU pool: %s; %s variant(s) at a time, one GPU each", ",".join(self.gpus), n_jobs)
        else:
            log.warning("hydra/launcher=joblib_gpus found no GPU: variants run on CPU, %s at a time", n_jobs)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not self.gpus:
            return
        lock_dir = Path(self.lock_dir or Path(str(config.hydra.sweep.dir)) / ".gpu-locks")
        self.pool = GpuPool(lock_dir, self.gpus)
        gpu = self.pool.acquire(int(config.hydra.job.num))
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
        log.info("job %s (%s) runs on GPU %s", config.hydra.job.num, config.hydra.job.override_dirname, gpu)

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        if self.pool is not None:
            self.pool.release()
            self.pool = None
