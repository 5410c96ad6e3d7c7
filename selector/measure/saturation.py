"""Over-saturation: an open-loop probe whose arrivals outrun the server.

Above its capacity a server cannot finish requests as fast as they arrive: its throughput stays
flat while the backlog, and every later request's latency with it, grows for as long as the probe
keeps sending. Waiting that out measures nothing new (round 3 waited 725 s for three such probes),
so the probe is ended once the backlog is seen growing.

The rule (docs/load-testing.md), checked at every window edge (a window is `gaps` mean arrival
gaps, at least `min_window_s`): over the last `windows` windows
- fewer requests finished than `keep_up` times those that arrived (throughput does not keep up), and
- the oldest request still in flight has waited longer at the last edge than at the first, and by
  more than `growth` of the span (latency grows with time instead of hovering).
Then the probe is over-saturated: nothing more is sent and the requests in flight are cut off
(they count as too slow, so the probe fails).

Pure bookkeeping over send and finish times, so the same rule runs live inside the load driver
(`guard`) and offline over a simulated timeline (`first_saturation`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

WINDOW_GAPS = 8.0  # mean arrival gaps per window
WINDOWS = 4  # windows looked back over
KEEP_UP = 0.8  # finished / arrived below this: not keeping up
GROWTH = 0.25  # the oldest request's wait grew by more than this share of the span


@dataclass
class Edge:
    t: float
    sent: int
    done: int
    oldest_s: float  # how long the oldest request still in flight has waited (0: none in flight)


@dataclass
class SaturationWatch:
    window_s: float
    windows: int = WINDOWS
    keep_up: float = KEEP_UP
    growth: float = GROWTH
    edges: list[Edge] = field(default_factory=list)
    reason: str = ""  # set once the probe is over-saturated
    at: float | None = None  # when (the edge's time)

    @classmethod
    def for_rate(cls, rate_rps: float, min_window_s: float = 0.1) -> SaturationWatch:
        return cls(window_s=max(min_window_s, WINDOW_GAPS / rate_rps))

    def observe(self, now: float, sent: Mapping[int, float], ends: Mapping[int, float]) -> str:
        """Record the edge at `now` (sent: request -> send time; ends: request -> finish time, for
        those finished); returns the reason once over-saturated, else ""."""
        if self.reason:
            return self.reason
        waiting = [now - t for i, t in sent.items() if t <= now and not ends.get(i, now + 1) <= now]
        self.edges.append(Edge(now, sum(1 for t in sent.values() if t <= now),
                               sum(1 for t in ends.values() if t <= now), max(waiting, default=0.0)))
        if len(self.edges) <= self.windows:
            return ""
        first, last = self.edges[-self.windows - 1], self.edges[-1]
        arrived, finished, span = last.sent - first.sent, last.done - first.done, last.t - first.t
        grew = last.oldest_s - first.oldest_s
        if arrived >= self.windows and finished < self.keep_up * arrived and grew > self.growth * span:
            self.at = now
            self.reason = (f"over-saturated: over the last {span:.3g} s {arrived} requests arrived and {finished} "
                           f"finished while the oldest in flight waited {first.oldest_s:.3g} s, then "
                           f"{last.oldest_s:.3g} s")
        return self.reason

    async def guard(self, body: Coroutine[Any, Any, None], started: Mapping[int, float],
                    traces: Mapping[int, Any]) -> None:
        """Run a level's sending (`body`), looking at it every window; cancel it once over-saturated."""
        task = asyncio.ensure_future(body)
        try:
            while not task.done():
                await asyncio.wait({task}, timeout=self.window_s)
                if task.done():
                    break
                ends = {i: t.end for i, t in traces.items()}
                if self.observe(time.perf_counter(), started, ends):
                    return
            await task  # its own exception, if any
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)


def first_saturation(sent: Sequence[float], ends: Sequence[float], window_s: float) -> SaturationWatch:
    """The rule replayed over a finished timeline (send and finish time per request, same clock):
    the watch as the live probe would have left it (its `at` and `reason`, or neither)."""
    watch = SaturationWatch(window_s=window_s)
    sent_by, ends_by = dict(enumerate(sent)), dict(enumerate(ends))
    t, last = min(sent) + window_s, max(ends)
    while t < last and not watch.observe(t, sent_by, ends_by):
        t += window_s
    return watch
