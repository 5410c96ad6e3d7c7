"""How busy the machine was during a load level: CPU of the measured process(es), GPU use and memory.

CPU is read twice (start and end of the level) from the kernel's per-process counters, so it costs
nothing in between. GPUs are sampled through NVML by a thread that sleeps between samples (no
busy-waiting), and only when NVML is there and a GPU is in play.

cpu_util_pct is CPU time over wall time in percent of the cores this process may use
(100 = every core busy), so it reads the same on any machine.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

log = logging.getLogger("selector.resources.utilization")


def available_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def process_cpu_seconds(procs: list[psutil.Process]) -> dict[int, float]:
    """User + system CPU seconds per pid (including children it has already reaped)."""
    out = {}
    for p in procs:
        try:
            t = p.cpu_times()
            out[p.pid] = t.user + t.system + t.children_user + t.children_system
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


class CpuMeter:
    """CPU seconds used between start() and stop() by a set of processes (found anew each time,
    so workers a server spawns mid-level count from when they appear)."""

    def __init__(self, processes: Callable[[], list[psutil.Process]]) -> None:
        self.processes = processes
        self._start: dict[int, float] = {}

    def start(self) -> None:
        self._start = process_cpu_seconds(self.processes())

    def stop(self) -> float:
        end = process_cpu_seconds(self.processes())
        return sum(v - self._start.get(pid, 0.0) for pid, v in end.items())


def own_process() -> list[psutil.Process]:
    return [psutil.Process()]


@dataclass
class GpuReading:
    util_pct: float | None  # mean over samples and devices
    mem_bytes: int | None  # highest memory in use seen (summed over the devices)


def nvml_indices(cuda_indices: list[int]) -> list[int]:
    """NVML numbers GPUs physically; CUDA numbers the ones CUDA_VISIBLE_DEVICES lets it see."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not visible:
        return cuda_indices
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    if all(v.isdigit() for v in ids):
        return [int(ids[i]) for i in cuda_indices if i < len(ids)]
    return cuda_indices  # UUIDs: fall back to the same numbers (right on single-GPU machines)


class GpuSampler:
    """Samples GPU utilisation and memory every `interval_s` on a sleeping thread.

    `devices`: NVML indices to watch, or None for every GPU NVML sees. Without NVML (no driver,
    no nvidia-ml-py) it reads nothing and stop() returns no figures.
    """

    def __init__(self, devices: list[int] | None = None, interval_s: float = 0.2) -> None:
        self.devices, self.interval_s = devices, interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._utils: list[float] = []
        self._mem_peak: int | None = None
        self._handles: list[object] = []

    def start(self) -> bool:
        try:
            import pynvml

            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            indices = self.devices if self.devices is not None else list(range(count))
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices if i < count]
        except Exception as e:  # ImportError, NVMLError (no driver, no GPU)
            log.debug("no GPU sampling: %s", e)
            return False
        if not self._handles:
            return False
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="gpu-sampler", daemon=True)
        self._thread.start()
        return True

    def _loop(self) -> None:
        import pynvml

        while True:
            try:
                utils, used = [], 0
                for h in self._handles:
                    utils.append(float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu))
                    used += int(pynvml.nvmlDeviceGetMemoryInfo(h).used)
                self._utils.append(sum(utils) / len(utils))
                self._mem_peak = max(self._mem_peak or 0, used)
            except Exception as e:  # a GPU that stops answering ends sampling, not the load test
                log.debug("GPU sampling stopped: %s", e)
                return
            if self._stop.wait(self.interval_s):
                return

    def stop(self) -> GpuReading:
        if self._thread is None:
            return GpuReading(None, None)
        self._stop.set()
        self._thread.join(timeout=5)
        self._thread = None
        try:
            import pynvml

            pynvml.nvmlShutdown()
        except Exception:
            pass
        util = sum(self._utils) / len(self._utils) if self._utils else None
        return GpuReading(util, self._mem_peak)


@dataclass
class Utilization:
    cpu_util_pct: float | None  # the measured process(es), percent of available cores
    harness_cpu_pct: float  # the load generator itself, percent of available cores
    gpu_util_pct: float | None
    gpu_mem_bytes: int | None


class UtilizationMonitor:
    """Brackets one load level: start() before it, stop() after it.

    measured: the processes whose CPU is reported (the server tree, or this process).
    harness_seconds: CPU seconds the load generator has used so far (thread or process clock);
      subtracted from `measured` when both are this process.
    gpu: NVML indices to sample, None for all, [] for none.
    """

    def __init__(self, measured: Callable[[], list[psutil.Process]] | None,
                 harness_seconds: Callable[[], float], gpu: list[int] | None, subtract_harness: bool) -> None:
        self.cpu = CpuMeter(measured) if measured is not None else None
        self.harness_seconds, self.subtract_harness = harness_seconds, subtract_harness
        self.gpu = GpuSampler(gpu) if gpu != [] else None
        self._t0 = self._h0 = 0.0

    def start(self) -> UtilizationMonitor:
        if self.gpu:
            self.gpu.start()
        if self.cpu:
            self.cpu.start()
        self._h0 = self.harness_seconds()
        self._t0 = time.perf_counter()
        return self

    def stop(self) -> Utilization:
        wall = max(time.perf_counter() - self._t0, 1e-9)
        harness = self.harness_seconds() - self._h0
        measured = self.cpu.stop() if self.cpu else None
        if measured is not None and self.subtract_harness:
            measured = max(0.0, measured - harness)
        gpu = self.gpu.stop() if self.gpu else GpuReading(None, None)
        scale = 100.0 / (wall * available_cores())
        return Utilization(
            cpu_util_pct=measured * scale if measured is not None else None,
            harness_cpu_pct=harness * scale,
            gpu_util_pct=gpu.util_pct,
            gpu_mem_bytes=gpu.mem_bytes,
        )
