"""A record's memory figures (RunRecord.memory): the peaks of each phase of a variant's life (docs/memory.md)."""

from __future__ import annotations

from selector.records_strict import StrictModel


class PeakMemory(StrictModel):
    """The most memory one phase of a variant's life held (docs/memory.md)."""

    rss_bytes: int | None = None  # the process's resident set (high-water mark over the phase)
    cuda_allocated_bytes: int | None = None  # torch's peak allocated on the device
    cuda_reserved_bytes: int | None = None  # torch's peak reserved (what the device had to give)


class MemoryResult(StrictModel):
    weight_bytes: int  # parameters + buffers as held in memory
    # The three phases (None in records made before they were measured apart):
    serving: PeakMemory | None = None  # after load: evaluation, latency and load tests
    load: PeakMemory | None = None  # loading the checkpoint as production would (from the cache)
    prepare: PeakMemory | None = None  # converting, quantizing, the fidelity reference (None: all cached)
    runtime_rss_bytes: int | None = None  # the process just before the model loaded (interpreter, libraries)
    # The worker process's whole life (in older records, the only peak there is):
    peak_rss_bytes: int | None = None
    cuda_max_allocated_bytes: int | None = None
    cuda_max_reserved_bytes: int | None = None
    artifact_bytes: int | None = None  # on-disk size of the checkpoint that was loaded
    planned_serving_bytes: int | None = None  # plan's estimate of the serving peak (weights, KV, activations, runtime)
    # A server's (selector/engines/served/footprint.py): `serving` is what the variant needs at the load it
    # was tested under (the footprint with the preallocated KV pool replaced by the part of it in
    # use at the peak); the footprint is what its processes held, pool and all.
    footprint: PeakMemory | None = None
    kv_pool_bytes: int | None = None  # the KV cache the server preallocated (every instance's)
    kv_peak_bytes: int | None = None  # the part of it in use at the peak (the server's own gauge)
    # tensors: counted in memory (in-process); checkpoint: its files at the served dtype; vllm: the
    # server's own figure; plan: plan's estimate (a server whose checkpoint is not on this machine)
    weights_source: str = "tensors"
