"""Where the time goes under load: the layer that dominates a load level's latency, named in words.

A request's end-to-end time is queue (waiting behind a running batch) + batch wait (waiting for
its batch to fill) + compute (prefill and decode); a server's histograms give queue and compute,
and what the client saw beyond them is "other" (HTTP, tokenizing, streaming). The rules, in
order (docs/load-testing.md, "Reading the diagnosis", states the same):

1. Shares: of the slowest requests (e2e at or above p95: LoadLevel.tail_ms) when the level has a
   per-request split, else of the mean request (each part's mean over the mean e2e).
2. A layer with at least half the time dominates; with none, the shares are listed. Beside a
   dominant layer, queueing or batch wait holding a quarter or more is named too (a knob fixes it).
3. The advice follows the layer: queueing and batch wait -> the engine's own knobs, as the engine
   advises (Engine.load_advice: in-process, more room in a batch or another instance and a shorter
   max_queue_delay_ms; vLLM, max_num_seqs or instances; another server, a replica); compute -> not a batching knob (smaller model or
   precision, faster device, more instances), noting when compute per request grew with load or
   throughput stopped growing; other -> the client and the server's front end.
4. Failed requests are said first; a level with no split says why (the server's own words).

Pure functions over LoadLevel: no I/O, nothing rendered here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from selector.engines.spec import Engine, server_advice
from selector.records import LoadLevel

DOMINANT = 0.5  # a layer holding at least this share of the time dominates the level
NOTABLE = 0.25  # beside the dominant layer, a queue or batch-wait share this large is named too
GREW = 1.5  # compute per request this many times the lightest level's: batches got slower
FLAT = 1.1  # throughput within this factor of the lightest level's: it stopped growing
LAYERS = ("queue", "batch_wait", "compute", "other")
WORDS = {"queue": "queueing", "batch_wait": "waiting for a batch to fill", "compute": "compute",
         "other": "outside the server's queue and compute"}
SHORT = {"queue": "queue", "batch_wait": "batch wait", "compute": "compute", "other": "other"}


@dataclass(frozen=True)
class Serving:
    """How a variant was served, so the advice names knobs it has: its engine
    (selector.engines.spec.Engine), whose own advice it is (Engine.load_advice), and its knobs' values
    as the record set them (Knob.short -> value). Whoever diagnoses builds it from the record
    (selector.engines.knobs.served_by); the default is a server whose knobs are not known here."""

    engine: Engine[Any] | None = None  # None: a server whose knobs are not known here
    knobs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Diagnosis:
    label: str  # "concurrency 8" | "2 req/s"
    basis: str  # "e2e p95" (the slowest requests) | "mean e2e" | "" (no split)
    shares: dict[str, float] = field(default_factory=dict)  # layer -> share of the basis
    dominant: str | None = None
    advice: str = ""
    text: str = ""  # the whole sentence

    @property
    def finding(self) -> str:
        """The sentence without its "at <level>, " (for a table that shows the level already)."""
        return self.text.removeprefix(f"at {self.label}, ")


def level_label(level: LoadLevel) -> str:
    if level.concurrency is not None:
        return f"concurrency {level.concurrency}"
    if level.rate_rps is None:  # a request file's recorded arrivals
        return f"the recorded arrivals x{level.replay_scale:g}"
    return f"{level.rate_rps:g} req/s"


def shares(level: LoadLevel) -> tuple[dict[str, float], str]:
    """Each layer's share of the level's time, and what it is a share of."""
    tail = level.tail_ms
    if tail.get("e2e_ms", 0) > 0 and all(f"{p}_ms" in tail for p in ("queue", "batch_wait", "compute")):
        return {p: tail[f"{p}_ms"] / tail["e2e_ms"] for p in ("queue", "batch_wait", "compute")}, "e2e p95"
    e2e = level.e2e_ms.mean if level.e2e_ms else 0.0
    parts = {p: getattr(level, f"{p}_ms") for p in ("queue", "batch_wait", "compute")}
    if e2e <= 0 or all(v is None for v in parts.values()):
        return {}, ""
    out = {p: v.mean / e2e for p, v in parts.items() if v is not None}
    total = sum(out.values())
    if total > 1:  # a server's histograms and the client's clock disagree a little: scale, keep proportions
        out = {p: v / total for p, v in out.items()}
    elif level.split_source not in ("", "scheduler"):  # a server: what its histograms do not cover
        out["other"] = 1 - total
    return out, "mean e2e"


def diagnose(level: LoadLevel, serving: Serving, lightest: LoadLevel | None = None) -> Diagnosis:
    """The sentence for one level; `lightest`: the ladder's lightest level, to tell growth with load."""
    label = level_label(level)
    failed = f"{level.errors} of {level.requests} requests failed; " if level.errors else ""
    split, basis = shares(level)
    if not split:
        why = level.split_note or "the requests carry no queue or compute timing"
        return Diagnosis(label, "", text=f"at {label}, {failed}no split of the time: {why}")
    top = max(split, key=lambda k: split[k])
    if split[top] < DOMINANT:
        listed = ", ".join(f"{SHORT[k]} {split[k]:.0%}" for k in LAYERS if k in split)
        return Diagnosis(label, basis, split, None, "",
                         f"at {label}, {failed}no single layer holds half of {basis} ({listed})")
    advice = _advice(top, level, serving, lightest)
    text = f"at {label}, {failed}{split[top]:.0%} of {basis} is {WORDS[top]}: {advice}"
    # A knob-sized share beside a dominant layer is still worth its knob.
    for other in ("queue", "batch_wait"):
        if other != top and split.get(other, 0.0) >= NOTABLE:
            text += f"; and {split[other]:.0%} is {WORDS[other]}: {_advice(other, level, serving, lightest)}"
    return Diagnosis(label, basis, split, top, advice, text)


def diagnose_ladder(levels: list[LoadLevel], serving: Serving) -> list[Diagnosis]:
    """One diagnosis per level, concurrency levels compared with the lightest one."""
    by_conc = [lv for lv in levels if lv.concurrency is not None]
    lightest = min(by_conc, key=lambda lv: lv.concurrency or 0) if by_conc else None
    return [diagnose(lv, serving, lightest if lv.concurrency is not None else None) for lv in levels]


def headline(levels: list[LoadLevel], serving: Serving) -> Diagnosis | None:
    """The diagnosis at the heaviest load: the highest concurrency, else the highest rate."""
    if not levels:
        return None
    heaviest = max(levels, key=lambda lv: (lv.concurrency is not None, lv.concurrency or lv.rate_rps or 0))
    return diagnose_ladder(levels, serving)[levels.index(heaviest)]


def _advice(layer: str, level: LoadLevel, serving: Serving, lightest: LoadLevel | None) -> str:
    if layer in ("queue", "batch_wait"):  # a knob's layer: the engine names its own knobs
        if serving.engine is None:
            return server_advice(layer)
        return serving.engine.load_advice(layer, serving.knobs, level.concurrency)
    if layer == "other":
        return "look at the client, the network and the server's front end (HTTP, tokenizing, streaming)"
    base = ("the model's own time, which no batching knob removes; a smaller precision or model, a faster device, "
            "or another instance to split the load")
    return base + _growth(level, lightest)


def _growth(level: LoadLevel, lightest: LoadLevel | None) -> str:
    """Why compute dominates more under load, when the ladder shows it."""
    if lightest is None or lightest is level or not (level.compute_ms and lightest.compute_ms):
        return ""
    grew = level.compute_ms.p50 / lightest.compute_ms.p50 if lightest.compute_ms.p50 > 0 else 0.0
    flat = lightest.request_throughput > 0 and level.request_throughput <= FLAT * lightest.request_throughput
    if grew >= GREW and flat:
        return (f" (compute p50 grew {grew:.1f}x from {level_label(lightest)} while requests/s stayed at "
                f"{level.request_throughput:.2g}: the device is saturated, bigger batches only run slower)")
    if grew >= GREW:
        return f" (compute p50 grew {grew:.1f}x from {level_label(lightest)}: each batch is bigger and slower)"
    return ""
