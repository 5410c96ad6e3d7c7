"""Was the machine busy with something else while a variant ran? Two processes each running torch
on every core slow each other down several-fold, so a latency measured then says more about the
neighbour than about the variant. This measures the CPU time other processes took meanwhile."""

from __future__ import annotations

import os
import time
from typing import Any

BUSY_SHARE = 0.25  # other processes took a quarter of the machine's CPU or more: say so


class CpuShare:
    """`with CpuShare() as share:` ... then `share.other` is the fraction of all cores' time that
    processes outside this one (and its children) used while the block ran."""

    def __enter__(self) -> CpuShare:
        import psutil

        self.cores = psutil.cpu_count() or 1
        self._t0, self._busy0, self._own0 = time.monotonic(), _busy(), _own()
        self.other: float | None = None
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.monotonic() - self._t0
        if wall < 1.0:
            return  # too short to say anything
        other = (_busy() - self._busy0) - (_own() - self._own0)
        self.other = max(0.0, min(1.0, other / (wall * self.cores)))

    def as_dict(self) -> dict[str, Any]:
        return {"other_cpu_share": None if self.other is None else round(self.other, 3), "cores": self.cores,
                "busy": self.other is not None and self.other >= BUSY_SHARE}


def _busy() -> float:
    import psutil

    t = psutil.cpu_times()
    return sum(getattr(t, f) for f in ("user", "nice", "system", "irq", "softirq", "steal") if hasattr(t, f))


def _own() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system
