"""One request's clock readings, however it was served (HTTP stream or in-process scheduler).

All times are `time.perf_counter()` seconds in the measuring process. Derived figures are in
milliseconds, the unit LoadLevel uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from selector.generation import ItemRef


@dataclass
class RequestTrace:
    sent: float  # when the request was issued: its arrival at the server or scheduler
    end: float = 0.0  # when its last byte (HTTP) or last token (in-process) arrived, or it failed
    token_times: list[float] = field(default_factory=list)  # each streamed chunk carrying text
    output_tokens: int = 0  # the server's usage count when it gives one, else the chunks seen
    prompt_tokens: int = 0
    text: str = ""
    error: str | None = None  # one line: why the request failed (None: it succeeded)
    # In-process dynamic batching only: when the scheduler took the request off its queue, and
    # when the batch holding it started computing.
    picked: float | None = None
    compute_start: float | None = None
    # The eval item its request was made from (GenerationRequest.item; the load driver copies it)
    item: ItemRef | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def ttft_ms(self) -> float | None:
        return (self.token_times[0] - self.sent) * 1e3 if self.token_times else None

    @property
    def e2e_ms(self) -> float:
        return (self.end - self.sent) * 1e3

    @property
    def itl_gaps_ms(self) -> list[float]:
        """Gaps between consecutive streamed chunks (a chunk is one token for the in-process
        scheduler and for most servers; a server that coalesces tokens shows fewer, longer gaps)."""
        t = self.token_times
        return [(b - a) * 1e3 for a, b in zip(t, t[1:])]

    @property
    def itl_mean_ms(self) -> float | None:
        gaps = self.itl_gaps_ms
        return sum(gaps) / len(gaps) if gaps else None

    @property
    def queue_ms(self) -> float | None:
        return (self.picked - self.sent) * 1e3 if self.picked is not None else None

    @property
    def batch_wait_ms(self) -> float | None:
        if self.picked is None or self.compute_start is None:
            return None
        return (self.compute_start - self.picked) * 1e3

    @property
    def compute_ms(self) -> float | None:
        return (self.end - self.compute_start) * 1e3 if self.compute_start is not None else None
