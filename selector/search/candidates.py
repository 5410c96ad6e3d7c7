"""What the adaptive search's driver (selector.search.driver) is handed and hands back: the candidates
it orders, the outcome of each run (with how far below a floor it fell), and the waves of names it
hands out to run."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Candidate:
    name: str
    planned: float  # planned objective (weight bytes), known before anything loads
    model: str
    needs_quantization: bool = False
    is_baseline: bool = False  # the model's baseline precision (bf16 of the same model)
    available: bool = True


@dataclass(frozen=True)
class Shortfall:
    """How far below a floor a candidate's full-set score on one task lies at best: the anytime bound
    a stopped candidate was stopped with, or a rejected one's full-set score itself."""

    task: str
    bound: float  # at most this (at least, for a ceiling) on the full set
    floor: float
    higher_is_better: bool = True
    anytime: bool = True  # False: the full set's score, no bound

    @property
    def gap(self) -> float:
        """What the full set would have to gain to reach the floor (a fraction: 0.3 = 30 points)."""
        return self.floor - self.bound if self.higher_is_better else self.bound - self.floor


@dataclass(frozen=True)
class Outcome:
    status: str  # eligible | rejected | stopped | failed | skipped
    reason: str = ""
    measured: float | None = None  # measured objective; required for eligible
    items: int | None = None  # items evaluated, when the runner reports them
    in_sequence: bool = True  # False: it fails a measured budget or limit, so the fixed sequence leaves it out
    shortfall: Shortfall | None = None  # its largest gap to a floor (stopped or rejected), for the sibling rule

    def __post_init__(self) -> None:
        if self.status not in ("eligible", "rejected", "stopped", "failed", "skipped"):
            raise ValueError(f"unknown outcome {self.status!r}")
        if self.status == "eligible" and self.measured is None:
            raise ValueError("an eligible outcome needs its measured objective")


@dataclass(frozen=True)
class Wave:
    kind: str  # first | search | evidence
    names: tuple[str, ...]

    @property
    def full(self) -> bool:
        """Evaluate every item, no early stopping (the reference, and evidence for the report)."""
        return self.kind != "search"
