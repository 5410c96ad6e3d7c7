"""What a capacity search (selector.measure.capacity) walks: the axes measure.load.capacity_on names, and
the levels of one (a rate, or a whole concurrency): where it starts, its bisection, a repeat run's steps."""

from __future__ import annotations

import math
from dataclasses import dataclass

from selector.config import LoadConfig


def searched_axes(cfg: LoadConfig) -> list[str]:
    """"rate", "concurrency" or both, in that order (measure.load.capacity_on)."""
    return ["rate", "concurrency"] if cfg.capacity_on == "both" else [cfg.capacity_on]


def requests_per_step(cfg: LoadConfig) -> int:
    """The fewest requests a probe's judged window holds (capacity_probe_requests)."""
    return cfg.capacity_probe_requests


@dataclass(frozen=True)
class Axis:
    """What is searched: a rate (any positive number) or a concurrency (whole numbers from 1)."""

    on: str
    start: float
    minimum: float
    tolerance: float
    maximum: float = math.inf  # a concurrency above a probe's request count is the same burst

    @classmethod
    def of(cls, cfg: LoadConfig, on: str) -> Axis:
        if on == "concurrency":  # more in flight than a window judges is no longer a steady state
            return cls(on, float(cfg.capacity_start_concurrency), 1.0, cfg.capacity_tolerance,
                       float(requests_per_step(cfg)))
        return cls(on, max(cfg.capacity_start_rps, cfg.capacity_min_rps), cfg.capacity_min_rps, cfg.capacity_tolerance)

    @property
    def whole(self) -> bool:
        return self.on == "concurrency"

    def snap(self, x: float) -> float:
        return min(self.maximum, max(self.minimum, float(round(x)) if self.whole else x))

    def mid(self, low: float, high: float) -> float:
        return float((low + high) // 2) if self.whole else (low + high) / 2

    def narrow(self, low: float, high: float) -> bool:
        """Bisection may stop: within the tolerance of its low end (a concurrency: or one apart)."""
        return high - low <= max(1.0 if self.whole else 0.0, self.tolerance * low)

    def away(self, centre: float, k: int, up: bool) -> float:
        """The k-th level (from 0) a repeat run tries on its way from `centre` to its crossing."""
        factor = (1 + 2 * self.tolerance) ** (2**k)
        if self.whole:
            step = max(2**k, round(centre * (factor - 1)))
            return self.snap(centre + step if up else centre - step)
        return self.snap(centre * factor if up else centre / factor)
