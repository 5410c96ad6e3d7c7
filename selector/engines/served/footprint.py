"""A server's memory, read off its own processes, and what of it the variant needs.

A server preallocates: vLLM reserves its whole KV cache at start (VLLM_CPU_KVCACHE_SPACE on CPU,
--gpu-memory-utilization of the GPU) whatever the variant needs, so its processes' footprint says
more about the setting than about the variant. What the variant needs at the load it was tested
under is that footprint with the pool replaced by the part of it in use at the peak:

    needed = footprint - KV pool + KV pool x peak usage

where the footprint is the server's processes' resident high-water marks summed (CPU; reset when
the server is ready, so loading is a peak of its own) or NVML's per-process used memory summed
(CUDA), and the usage is the server's own gauge (vllm:kv_cache_usage_perc), sampled while it
serves. The footprint is kept beside it, named as such (MemoryResult.footprint).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from selector.engines.vllm.metrics import VLLM
from selector.records import MemoryResult, PeakMemory

log = logging.getLogger("selector.engines.served.footprint")

KV_USAGE_GAUGES = VLLM.kv_usage  # only vLLM reports its KV pool's use
SAMPLE_S = 0.25  # the KV gauge moves with every scheduler step; a short peak between samples is missed


def _status_kib(pid: int, field: str) -> int:
    try:
        match = re.search(rf"^{field}:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.MULTILINE)
    except OSError:
        return 0
    return int(match.group(1)) if match else 0


def _hwm_kib(pid: int) -> int:
    return _status_kib(pid, "VmHWM")


def _reset_hwm(pid: int) -> bool:
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # our own child: the same user may reset it
        return True
    except OSError:
        return False


def gauge(text: str, names: tuple[str, ...]) -> float | None:
    """The first of these Prometheus gauges in a /metrics page, summed over its label sets."""
    for name in names:
        values = re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.eE+-]+)$", text, re.MULTILINE)
        if values:
            return sum(float(v) for v in values)
    return None


class ServerFootprint:
    """The memory of a variant's servers from the moment they are ready: their processes' peaks,
    and (sampled on a sleeping thread) each one's KV-cache usage and, on a GPU, NVML's per-process
    used memory."""

    def __init__(self, servers: list[Any], metrics_urls: list[str], kv_pool_bytes: Callable[[], int | None]) -> None:
        self.servers, self.urls, self.kv_pool_bytes = servers, metrics_urls, kv_pool_bytes
        self.load_rss: int | None = None
        self.ready_rss: int | None = None  # resident when ready: runtime, weights and the KV pool
        self.resettable = False
        self.kv_usage: list[float | None] = [None] * len(metrics_urls)  # each instance's peak usage (0..1)
        self.gpu_used: int | None = None  # the most NVML saw the servers' processes use at once
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        procs = self._processes()
        if not procs:
            return
        self.load_rss = sum(_hwm_kib(p.pid) for p in procs) * 1024 or None
        self.ready_rss = sum(_status_kib(p.pid, "VmRSS") for p in procs) * 1024 or None
        self.resettable = all(_reset_hwm(p.pid) for p in procs)
        self._thread = threading.Thread(target=self._loop, name="server-footprint", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _processes(self) -> list[Any]:
        return [p for s in self.servers for p in s.processes()]

    def _loop(self) -> None:
        with httpx.Client(timeout=5.0, trust_env=False) as client:
            while not self._stop.is_set():
                self.sample(client)
                self._stop.wait(SAMPLE_S)

    def sample(self, client: httpx.Client) -> None:
        for i, url in enumerate(self.urls):
            try:
                usage = gauge(client.get(url).text, KV_USAGE_GAUGES)
            except httpx.HTTPError:
                usage = None
            if usage is not None:
                self.kv_usage[i] = max(self.kv_usage[i] or 0.0, usage)
        used = _nvml_used({p.pid for p in self._processes()})
        if used is not None:
            self.gpu_used = max(self.gpu_used or 0, used)

    def result(self, weight_bytes: int | None, artifact_bytes: int | None) -> MemoryResult:
        """What serving the variant held, read now (before the servers stop)."""
        with httpx.Client(timeout=5.0, trust_env=False) as client:
            self.sample(client)  # the last moment counts too
        procs = self._processes()
        footprint_rss = sum(_hwm_kib(p.pid) for p in procs) * 1024 or None
        pool = self.kv_pool_bytes()
        pools = [pool] * len(self.urls) if pool is not None else []
        used = [round(p * u) for p, u in zip(pools, self.kv_usage) if u is not None] if pools else []
        kv_peak = sum(used) if pools and len(used) == len(pools) else None
        footprint = PeakMemory(rss_bytes=footprint_rss, cuda_reserved_bytes=self.gpu_used) if procs else None

        def needed(total: int | None) -> int | None:
            if total is None or kv_peak is None:
                return None
            return max(0, total - sum(pools) + kv_peak)

        serving = None
        if footprint is not None:
            serving = PeakMemory(rss_bytes=needed(footprint_rss), cuda_reserved_bytes=needed(self.gpu_used))
        runtime = None
        if self.ready_rss is not None and pools and weight_bytes is not None:  # what serves any model
            runtime = max(0, self.ready_rss - sum(pools) - weight_bytes)
        return MemoryResult(
            weight_bytes=weight_bytes or 0, serving=serving, footprint=footprint, runtime_rss_bytes=runtime,
            load=PeakMemory(rss_bytes=self.load_rss) if self.resettable and self.load_rss else None,
            kv_pool_bytes=sum(pools) if pools else None, kv_peak_bytes=kv_peak,
            artifact_bytes=artifact_bytes, weights_source="checkpoint")


def _nvml_used(pids: set[int]) -> int | None:
    """The GPU memory these processes use now, summed over every GPU (None without NVML or GPU)."""
    if not pids:
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        total, seen = 0, False
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if proc.pid in pids and proc.usedGpuMemory is not None:
                    total, seen = total + int(proc.usedGpuMemory), True
        return total if seen else None
    except Exception:  # no driver, no GPU, no nvidia-ml-py: a CPU server
        return None


FLOAT_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}
INT_SIZES = {"I64": 8, "U64": 8, "I32": 4, "U32": 4, "I16": 2, "U16": 2, "I8": 1, "U8": 1, "BOOL": 1,
             "F8_E4M3": 1, "F8_E5M2": 1}
SERVED_SIZE = {"bfloat16": 2, "float16": 2, "float32": 4, "auto": None}


def checkpoint_weight_bytes(folder: str | Path, dtype: str) -> int | None:
    """Bytes of a safetensors checkpoint's tensors as a server holds them: floating tensors at the
    served dtype (a float32 folder served in bf16 holds half), packed integers as stored. Read from
    the files' headers: nothing is loaded."""
    from safetensors import safe_open

    files = sorted(Path(folder).glob("*.safetensors")) if Path(folder).is_dir() else []
    if not files:
        return None
    served = SERVED_SIZE.get(dtype)
    total = 0
    for f in files:
        with safe_open(str(f), framework="numpy") as handle:
            for name in handle.keys():
                piece = handle.get_slice(name)
                numel = 1
                for d in piece.get_shape():
                    numel *= d
                kind = piece.get_dtype()
                size = (served or FLOAT_DTYPES[kind]) if kind in FLOAT_DTYPES else INT_SIZES.get(kind, 1)
                total += numel * size
    return total
