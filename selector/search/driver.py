"""The adaptive search as a pure state machine: which candidates to run next, and why each one ends
where it does. No I/O: the Hydra sweep drives it, and so does benchmarks/adaptive_simulation.py.

    driver = SearchDriver(candidates, workers=2)
    while not driver.done:
        wave = driver.next_wave()          # None: wait for the running ones
        ...run wave.names (every item when wave.full), then driver.report(name, outcome) for each

Order: smallest planned objective first. Candidates within `tie_tolerance` of each other count as
equal-sized, and among those the ones needing no quantization go first (they load without a
calibration pass). Equal means: within tie_tolerance (relative) of the smallest candidate of its
group, groups formed walking up from the smallest. The tolerance is kept <= the pruning margin, so
putting a slightly larger unquantized candidate first can never get a smaller one pruned.

Fixed sequence (`sequence`, policy.winner_control=fixed_sequence): the order is the one the
selection walks (selection.sequence.ladder_order: parameters, then precision bits, largest first),
given by the caller, so the search and the selection can never disagree on which variant a failure
blocks; once a candidate in the sequence fails a floor, the ones after it are not needed. A failure
of a memory budget or latency limit alone (`Outcome.in_sequence` false) does not stop it.

Baseline first (`baseline_first`: on when fidelity is measured or the sibling rule is on; not under
the fixed sequence, whose order already puts a model's baseline before its lower precisions): a
model's baseline precision moves to just before that model's first other candidate, and no sibling
starts while its baseline runs. Every sibling's fidelity is measured
against the baseline's reference, which the baseline's own run writes; run after it, a sibling finds
the reference cached instead of loading the baseline a second time in its preparation process.
Moving a larger candidate earlier never gets a smaller one pruned; the price is a baseline run that
pruning would have spared when none of that model's candidates wins, and waves that end early
(benchmarks/adaptive_simulation.py measures both).

Pruning (objective weight_memory only): once a candidate is eligible, every candidate not yet run
whose planned weight exceeds the best measured weight by more than `prune_margin` is "not needed".
The margin covers the plan's error: planned weights were within 1.7% of measured ones
(docs/scale-out.md), so 5% leaves room. Latency and cost cannot be planned, so nothing is pruned
under them: every candidate is measured, and only early rejection saves work.

Siblings of a failing baseline (`sibling_margin`): when a model's baseline precision is stopped or
rejected on a floor with a bound further below it than `sibling_margin` (the most a quantized copy
gained over its own baseline on any task in this project's measurements, with room: docs/search.md),
the model's other candidates not yet started are not needed: they would need to gain more than that
on the same task to pass. None turns it off; `complete` too.

Evidence: after the search, the best candidate's own model at its baseline precision must have
been evaluated on every item (the report compares the two on the same items); if it was pruned or
stopped early, it is handed out once more in an "evidence" wave. `first` candidates (the reference
under the non_inferiority rule) run fully before the ordered search starts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from selector.search.candidates import Candidate, Outcome, Shortfall, Wave
from selector.search.order import baselines_before_siblings, search_order

STATUSES = ("pending", "running", "eligible", "rejected", "stopped", "failed", "skipped", "pruned")
FULL_SET = ("eligible", "rejected")  # outcomes that saw every item
PRUNABLE_OBJECTIVES = ("weight_memory",)


@dataclass
class State:
    candidate: Candidate
    status: str = "pending"
    reason: str = ""
    measured: float | None = None
    items: int = 0
    runs: int = 0  # times materialized (an evidence run after an early stop makes two)
    role: str = "search"
    pruned_by: str = ""  # why not needed: pruning | sequence | sibling


@dataclass
class SearchDriver:
    candidates: Iterable[Candidate]
    workers: int = 1
    objective: str = "weight_memory"
    complete: bool = False  # run everything: no pruning (early rejection still applies)
    first: tuple[str, ...] = ()
    prune_margin: float = 0.05
    tie_tolerance: float = 0.05
    sequence: tuple[str, ...] = ()  # policy.winner_control=fixed_sequence: the selection's order, walked as given
    baseline_first: bool = False  # each model's baseline runs before its other precisions (see above)
    sibling_margin: float | None = None  # siblings of a baseline missing a floor by more are not needed
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        pool = list(self.candidates)
        if len({c.name for c in pool}) != len(pool):
            raise ValueError("candidate names must be unique")
        if self.workers < 1 or not 0 <= self.tie_tolerance <= self.prune_margin:
            raise ValueError("workers >= 1 and 0 <= tie_tolerance <= prune_margin, please")
        self.states = {c.name: State(c) for c in pool}
        missing = [n for n in self.first if n not in self.states]
        if missing:
            raise ValueError(f"first names unknown candidates: {', '.join(missing)}")
        ordered = search_order(pool, self.tie_tolerance)
        if self.sequence:  # the selection's fixed sequence, exactly: one order for both
            if sorted(self.sequence) != sorted(self.states):
                raise ValueError("sequence must name every candidate exactly once")
            by_name = {c.name: c for c in pool}
            ordered = [by_name[n] for n in self.sequence]
        elif self.baseline_first:  # (the fixed sequence's order is its rule)
            ordered = baselines_before_siblings(ordered)
        self.order = tuple(c.name for c in ordered if c.name not in self.first)
        for name in self.first:
            self.states[name].role = "first"
        for state in self.states.values():
            if not state.candidate.available:
                state.status, state.reason = "skipped", "unavailable"
        if self.sibling_margin is not None and not 0 <= self.sibling_margin <= 1:
            raise ValueError(f"sibling_margin is a fraction in [0, 1] (or None), got {self.sibling_margin}")
        self.pruning = self.objective in PRUNABLE_OBJECTIVES and not self.complete and not self.descending
        if self.descending:
            self.notes.append("fixed sequence: largest first; once one fails a floor, the smaller ones cannot be "
                              "claimed and are not measured")  # fmt: skip
        elif self.objective not in PRUNABLE_OBJECTIVES:
            self.notes.append(f"objective {self.objective}: the plan cannot estimate it, so no candidate is pruned; "
                              "only early rejection saves work")  # fmt: skip
        elif self.complete:
            self.notes.append("complete: every candidate runs; only early rejection saves work")
        self._evidence_planned = False
        self._evidence_for: str | None = None

    # ---- handing out work ----------------------------------------------------------------

    def next_wave(self) -> Wave | None:
        """Up to `workers` minus the running candidates, in order; None when nothing can start now."""
        free = self.workers - len(self._with("running"))
        if free <= 0:
            return None
        first = [n for n in self.first if self.states[n].status == "pending"]
        if first:
            return self._start("first", first[:free])
        if any(self.states[n].status == "running" for n in self.first):
            return None  # the ordered search waits for the reference
        pending = [n for n in self.order if self.states[n].status == "pending"]
        if pending:
            startable = self._startable(pending, free)
            return self._start("search", startable) if startable else None
        if self._with("running"):
            return None
        if not self._evidence_planned:
            self._evidence_planned = True
            needed = self._evidence_needed()
            if needed:
                self._evidence_for = self.best
                return self._start("evidence", [needed])
        return None

    @property
    def done(self) -> bool:
        """Nothing running or left to run, and the evidence wave handed out or not needed."""
        if self._with("running", "pending"):
            return False
        return self._evidence_planned or self._evidence_needed() is None

    def _startable(self, pending: list[str], free: int) -> list[str]:
        """The next `free` pending names in order, up to (baseline_first) a sibling whose baseline is
        running or starts in this same wave: it would make the reference a second time. The wave ends
        there rather than skip ahead, since what comes later is larger and may yet be pruned."""
        wave: list[str] = []
        for name in pending[:free]:
            model = self.states[name].candidate.model
            if self.baseline_first and not self.states[name].candidate.is_baseline and any(
                    s.candidate.model == model and s.candidate.is_baseline
                    and (s.status == "running" or s.candidate.name in wave) for s in self.states.values()):
                break
            wave.append(name)
        return wave

    def _start(self, kind: str, names: list[str]) -> Wave:
        for name in names:
            state = self.states[name]
            state.status, state.runs = "running", state.runs + 1
            if kind == "evidence":
                state.role = "evidence"
        return Wave(kind, tuple(names))

    # ---- receiving outcomes ----------------------------------------------------------------

    def report(self, name: str, outcome: Outcome) -> None:
        state = self.states[name]
        if state.status != "running":
            raise ValueError(f"{name} is not running (status {state.status})")
        state.status, state.measured = outcome.status, outcome.measured
        state.reason = outcome.reason or outcome.status
        if state.role == "evidence":
            state.reason = f"evidence for {self._evidence_for}: {state.reason}"
        if outcome.status == "skipped":
            state.runs -= 1  # never loaded
        state.items += outcome.items or 0
        if outcome.status == "eligible" and self.pruning:
            self._prune()
        if outcome.status in ("rejected", "stopped") and state.role != "evidence" and not self.complete:
            if state.candidate.is_baseline and self.sibling_margin is not None:
                self._siblings_not_needed(name, outcome.shortfall)
            if self.descending and outcome.in_sequence:
                self._stop_sequence(name)

    @property
    def descending(self) -> bool:
        """The fixed sequence: largest first, nothing after a failure."""
        return bool(self.sequence)

    @property
    def best(self) -> str | None:
        """The eligible candidate with the lowest measured objective (ties: the name). The final
        winner is still the selection's to pick from the records; this drives pruning and evidence."""
        eligible = [s for s in self.states.values() if s.status == "eligible"]
        return min(eligible, key=lambda s: (s.measured, s.candidate.name)).candidate.name if eligible else None

    def _prune(self) -> None:
        best = self.states[self.best]  # type: ignore[index]
        ceiling = best.measured * (1 + self.prune_margin)  # type: ignore[operator]
        for name in self.order:
            state = self.states[name]
            if state.status == "pending" and state.candidate.planned > ceiling:
                state.status, state.pruned_by = "pruned", "pruning"
                state.reason = (f"not needed: {best.candidate.name} already meets every floor and is smaller "
                                f"(planned {_gb(state.candidate.planned)} > {_gb(best.measured)} measured "
                                f"+ {100 * self.prune_margin:g}%)")  # fmt: skip

    def _stop_sequence(self, failed: str) -> None:
        """Fixed sequence: nothing after the first failure can be claimed, so it is not measured."""
        for name in self.order:
            state = self.states[name]
            if state.status == "pending":
                state.status, state.pruned_by = "pruned", "sequence"
                state.reason = (f"not needed: the fixed sequence down the size ladder stopped at {failed}, "
                                "so no smaller variant can be claimed")  # fmt: skip

    def _siblings_not_needed(self, baseline: str, shortfall: Shortfall | None) -> None:
        """The model's candidates not yet started, when its baseline misses a floor by more than a
        quantized copy can plausibly gain (sibling_margin)."""
        if shortfall is None or shortfall.gap <= self.sibling_margin + 1e-12:  # type: ignore[operator]
            return
        model = self.states[baseline].candidate.model
        most = "at most" if shortfall.higher_is_better else "at least"
        how = "anytime bound" if shortfall.anytime else "all items scored"
        sign = "+" if shortfall.higher_is_better else "-"
        for name in self.order:
            state = self.states[name]
            if state.status == "pending" and state.candidate.model == model and not state.candidate.is_baseline:
                state.status, state.pruned_by = "pruned", "sibling"
                state.reason = (f"not needed: {baseline} is {most} {100 * shortfall.bound:.1f}% on {shortfall.task} "
                                f"({how}); a quantized copy would need {sign}{100 * shortfall.gap:.1f} points "
                                f"(more than search.sibling_margin, {100 * self.sibling_margin:g} points)")  # type: ignore[operator]

    def _evidence_needed(self) -> str | None:
        """The best candidate's baseline, when it has not seen every item; None otherwise."""
        best = self.best
        if best is None:
            return None
        model = self.states[best].candidate.model
        baselines = [s for s in self.states.values() if s.candidate.model == model and s.candidate.is_baseline]
        if not baselines or baselines[0].candidate.name == best:
            if not baselines:
                self._note(f"{best}: no baseline precision of {model} among the candidates; nothing to compare with")
            return None
        base = baselines[0]
        if base.status in FULL_SET:
            return None
        if base.status in ("failed", "skipped"):
            self._note(f"{best}: its baseline {base.candidate.name} {base.status}; the report cannot compare the two")
            return None
        return base.candidate.name

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    # ---- what happened ----------------------------------------------------------------------

    def _with(self, *statuses: str) -> list[str]:
        return [n for n, s in self.states.items() if s.status in statuses]

    def verdicts(self) -> list[tuple[str, str, str]]:
        """(name, status, one-line reason) for every candidate: first, then in search order."""
        return [(n, self.states[n].status, self.states[n].reason) for n in (*self.first, *self.order)]

    def counts(self) -> dict[str, int]:
        states = self.states.values()
        return {
            "candidates": len(self.states),
            "materialized": sum(s.runs for s in states),
            "items": sum(s.items for s in states),
            **{status: sum(s.status == status for s in states) for status in STATUSES},
            "siblings_not_needed": sum(s.status == "pruned" and s.pruned_by == "sibling" for s in states),
        }


def _gb(n_bytes: float | None) -> str:
    """Weight memory (the prunable objective) as people read it."""
    return "?" if n_bytes is None else f"{n_bytes / 1e9:.3g} GB"
