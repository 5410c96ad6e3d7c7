"""The order the adaptive search runs its candidates in (selector.search.driver's docstring says why):
smallest planned objective first, unquantized first among equals, and (baseline_first) each model's
baseline before its other precisions."""

from __future__ import annotations

from collections.abc import Iterable

from selector.search.candidates import Candidate


def search_order(candidates: Iterable[Candidate], tie_tolerance: float) -> list[Candidate]:
    """Smallest planned objective first; within a group of equal size (within tie_tolerance of the
    group's smallest), unquantized before quantized, then size, then name."""
    by_size = sorted(candidates, key=lambda c: (c.planned, c.name))
    out: list[Candidate] = []
    i = 0
    while i < len(by_size):
        j, anchor = i, by_size[i].planned
        while j < len(by_size) and by_size[j].planned <= anchor * (1 + tie_tolerance):
            j += 1
        out += sorted(by_size[i:j], key=lambda c: (c.needs_quantization, c.planned, c.name))
        i = j
    return out


def baselines_before_siblings(ordered: list[Candidate]) -> list[Candidate]:
    """`ordered` with each available baseline moved to just before its model's first other
    available candidate (when it was later than that)."""
    out = list(ordered)
    for base in [c for c in ordered if c.is_baseline and c.available]:
        siblings = [i for i, c in enumerate(out) if c.model == base.model and c is not base and c.available]
        if siblings and out.index(base) > siblings[0]:
            out.remove(base)
            out.insert(siblings[0], base)
    return out
