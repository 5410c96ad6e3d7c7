"""A device's memory bandwidth as a large device-to-device copy achieves it.

Decoding one token reads every weight once, so weight bytes / this bandwidth is the fastest a
batch-1 decode step can be on that device: the yardstick for a measured time per output token.
"""

from __future__ import annotations

import statistics
from typing import Any


def copy_bandwidth(device: Any, nbytes: int = 2 * 2**30, repeats: int = 5) -> float:
    """Bytes per second moved by `dst.copy_(src)` on a CUDA device (each byte read once and
    written once, so 2 x nbytes per copy), the median of `repeats` copies after a warm-up."""
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # warm-up: first touch, allocator
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes / statistics.median(times)
