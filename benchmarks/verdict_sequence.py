"""The fixed sequence at the edges, through the real decision code (issue 36, points 1 and 2); run
by benchmarks/verdict_edges.py, which writes the tables.

(a) A memory limit the largest variant misses: `winner_control: fixed_sequence` with
    `max_weight_gb` on the six-variant ladder of verdict_edges with a seventh, larger variant on top
    whose 32 GB of weights are over a 20 GB limit: how often the recommended variant truly misses a
    floor, and how often there is no winner, against the six variants alone (the same draws). A
    budget is a measurement, not a hypothesis under test: it must not end the sequence.
(b) The `+sweep=qwen` ladder (Qwen2.5 7B / 14B / 32B x bf16 / int8 / int4, weight memory as
    `plan` estimates it, so 14B int4 is planned smaller than 7B bf16): under fixed_sequence, does
    the search's own pick (the variant it measured eligible and smallest) agree with what select()
    recommends from the search's records, and with the full grid's recommendation?

Every search here is a sweep's search: the real SearchDriver, the real evaluation loop and
stopper, each outcome judged by select() and turned into the driver's Outcome by the sweep's own
function (selector.sweep.outcomes). The script runs on older checkouts too (the "before" figures):
what a checkout lacks is detected, not assumed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from selector.config import PolicyConfig
from selector.records import MemoryResult, RunRecord, SampleRecord, TaskResult, Variant
from selector.search.sequential import TaskSpec, floor_tests_for_policy
from selector.selection import select
from selector.selection.precision import precision_bits
from selector.variant import evaluation

# name, parameters, true arithmetic accuracy above (below) its floor: verdict_edges.LADDER
LADDER = (("xl", 8e9, 0.25), ("l", 4e9, 0.20), ("m", 2e9, 0.15), ("s", 1e9, -0.005), ("xs", 5e8, -0.01),
          ("xxs", 2.5e8, -0.02))
TOP = ("xxl", 16e9, 0.30)  # (a): a larger variant on top, its 32 GB of bf16 weights over LIMIT_GB
LIMIT_GB = 20.0  # only TOP misses it
QWEN = (("qwen2.5-7b", 7.62), ("qwen2.5-14b", 14.77), ("qwen2.5-32b", 32.76))
QWEN_PRECISIONS = (("bf16", 0.0), ("int8", -0.01), ("gptq-int4", -0.05))  # precision, its mean accuracy change


class MemoryStore:
    """The item store's interface in memory (the store is I/O, not the thing measured)."""

    def __init__(self) -> None:
        self.items: dict[str, dict[str, SampleRecord]] = {}

    def load(self, task: str) -> dict[str, SampleRecord]:
        return dict(self.items.get(task, {}))

    def append(self, task: str, records: list[SampleRecord]) -> None:
        self.items.setdefault(task, {}).update((r.id, r) for r in records)


def _tasks(sizes: dict[str, int]) -> list[Any]:
    from types import SimpleNamespace

    return [SimpleNamespace(name=t, type="multiple_choice", max_new_tokens=0,
                            items=[SimpleNamespace(id=f"{t}-{i}") for i in range(n)]) for t, n in sizes.items()]


def _result(task: str, scores: dict[str, float]) -> TaskResult:
    values = list(scores.values())
    return TaskResult(task=task, metric="exact_match", value=float(np.mean(values)), ci_low=0.0, ci_high=1.0,
                      n=len(values), item_scores=dict(scores))


def _record(name: str, samples: dict[str, dict[str, SampleRecord]], params: float, weight_bytes: float,
            info: Any, decision: Any) -> RunRecord:
    """The record a worker writes: the items it scored, its weights, and where it stopped."""
    model, precision = name.split("/")
    tasks = {t: _result(t, {i: s.score for i, s in seen.items()}) for t, seen in samples.items() if seen}
    stopped = decision is not None
    return RunRecord(key=name, variant=Variant(model=model, precision=precision, params=int(params)),
                     status="stopped" if stopped else "completed", tasks=tasks,
                     reason=f"stopped early: {decision.reason}" if stopped else "",
                     memory=MemoryResult(weight_bytes=int(weight_bytes)), search=info)


def _driver(names: list[str], planned: dict[str, float], params: dict[str, float], pol: PolicyConfig) -> Any:
    """The driver as the sweep builds it (selector.sweep.lifecycle), on this checkout."""
    from selector.search.candidates import Candidate
    from selector.search.driver import SearchDriver

    cands = [Candidate(n, planned[n], n.split("/")[0], is_baseline=n.endswith("/bf16")) for n in names]
    if pol.winner_control != "fixed_sequence":
        return SearchDriver(cands)
    if "sequence" in SearchDriver.__dataclass_fields__:  # one order for search and selection
        from selector.selection.sequence import ladder_order

        entries = [(n, params[n], precision_bits(n.split("/")[1])) for n in names]
        return SearchDriver(cands, sequence=tuple(ladder_order(entries)))
    return SearchDriver(cands, descending=True)  # before: the search walked planned bytes, largest first


def _outcome(record: RunRecord, pol: PolicyConfig, records: list[RunRecord]) -> Any:
    """The driver's Outcome for a record, by the sweep's own function on this checkout."""
    from selector.sweep import outcomes

    verdict = next((v for v in select(records, pol).verdicts if v.variant == record.name), None)
    if hasattr(outcomes, "outcome_of"):
        return outcomes.outcome_of(record, verdict, pol)
    return outcomes._outcome(record, verdict, pol.objective)


def searched(pops: dict[str, dict[str, np.ndarray]], pol: PolicyConfig, planned: dict[str, float],
             params: dict[str, float], weights: dict[str, float], rng: np.random.Generator
             ) -> tuple[str | None, str | None, int]:
    """One adaptive search as a sweep runs it: (select()'s winner from its records, the search's
    own pick (driver.best), items scored)."""
    sizes = {t: len(s) for t, s in next(iter(pops.values())).items()}
    driver = _driver(list(pops), planned, params, pol)
    stopper = floor_tests_for_policy(pol, {t: TaskSpec(n) for t, n in sizes.items()}, 0.05, 12)
    tasks, seed = _tasks(sizes), int(rng.integers(2**31))
    records: dict[str, RunRecord] = {}
    items = 0
    while not driver.done:
        wave = driver.next_wave()
        if wave is None:
            break
        for name in wave.names:
            pop = pops[name]

            def score(task, ids):  # type: ignore[no-untyped-def]
                return [SampleRecord(task=task.name, id=i, prompt="", output="", target="",
                                     score=float(pop[task.name][int(i.rsplit("-", 1)[1])])) for i in ids]  # fmt: skip
            out = evaluation.run(tasks, MemoryStore(), score, seed=seed, round_size=None if wave.full else 12,
                                 stopper=None if wave.full else stopper)  # fmt: skip
            items += out.info.items_evaluated
            records[name] = _record(name, out.samples, params[name], weights[name], out.info, out.decision)
            driver.report(name, _outcome(records[name], pol, list(records.values())))
    return select(list(records.values()), pol).winner, driver.best, items


def full_records(pops: dict[str, dict[str, np.ndarray]], params: dict[str, float],
                 weights: dict[str, float]) -> list[RunRecord]:
    """The full grid's records: every item of every variant."""
    out = []
    for name, pop in pops.items():
        samples = {t: {f"{t}-{i}": SampleRecord(task=t, id=f"{t}-{i}", prompt="", output="", target="",
                                                 score=float(v)) for i, v in enumerate(s)} for t, s in pop.items()}
        out.append(_record(name, samples, params[name], weights[name], None, None))
    return out


def _draw(truth: dict[str, dict[str, float]], sizes: dict[str, int], rng: np.random.Generator
          ) -> dict[str, dict[str, np.ndarray]]:
    return {name: {t: (rng.random(n) < truth[name][t]).astype(float) for t, n in sizes.items()}
            for name in truth}  # fmt: skip


def with_limit(draws: int, rng: np.random.Generator, sizes: dict[str, int], floors: dict[str, float],
               rule: dict[str, Any]) -> dict[str, dict[str, float]]:
    """The winner's error per winner_control on LADDER (six variants), and (a) on LADDER with a
    larger variant on top (TOP, 32 GB of weights) without and with max_weight_gb=LIMIT_GB, which
    only TOP misses: with the limit the sequence must behave exactly as on LADDER alone (the same
    draws, so the same verdicts), without it TOP leads the walk. The recommended variant truly misses
    a floor / there is no winner, on the grid and through the search."""
    ladder = (TOP, *LADDER)
    params = {f"{n}/bf16": p for n, p, _ in ladder}
    weights = {n: 2 * p for n, p in params.items()}
    gaps = {f"{n}/bf16": g for n, _, g in ladder}
    truth = {n: {t: floors[t] + gaps[n] if t == "arithmetic" else min(0.99, floors[t] + 0.25) for t in sizes}
             for n in params}  # fmt: skip
    six = [f"{n}/bf16" for n, _, _ in LADDER]
    cases = {"none, six variants": ("none", six, None), "fixed_sequence, six variants": ("fixed_sequence", six, None),
             "none, seven, no limit": ("none", list(params), None),
             "fixed_sequence, seven, no limit": ("fixed_sequence", list(params), None),
             f"none, seven, max_weight_gb={LIMIT_GB:g}": ("none", list(params), LIMIT_GB),
             f"fixed_sequence, seven, max_weight_gb={LIMIT_GB:g}": ("fixed_sequence", list(params), LIMIT_GB)}
    tally = {case: dict.fromkeys(("grid wrong", "grid none", "search wrong", "search none", "items"), 0)
             for case in cases}  # fmt: skip
    for _ in range(draws):
        drawn = _draw(truth, sizes, rng)
        seed = int(rng.integers(2**31))
        for case, (control, names, limit) in cases.items():
            pops = {n: drawn[n] for n in names}
            pol = PolicyConfig(floors=dict(floors), winner_control=control, max_weight_gb=limit, **rule)
            t = tally[case]
            winner = select(full_records(pops, params, weights), pol).winner
            t["grid none"] += winner is None
            t["grid wrong"] += winner is not None and gaps[winner] < 0
            winner, _, items = searched(pops, pol, weights, params, weights, np.random.default_rng(seed))
            t["search none"] += winner is None
            t["search wrong"] += winner is not None and gaps[winner] < 0
            t["items"] += items / (sum(sizes.values()) * len(names))
    return {case: {"winner misses a floor (grid)": t["grid wrong"] / draws, "no winner (grid)": t["grid none"] / draws,
                   "winner misses a floor (search)": t["search wrong"] / draws,
                   "no winner (search)": t["search none"] / draws,
                   "items scored (share of the grid)": t["items"] / draws, "draws": draws}
            for case, t in tally.items()}  # fmt: skip


def qwen_ladder() -> tuple[dict[str, float], dict[str, float]]:
    """(planned weight bytes, parameters) of the qwen ladder, from the shipped configs and `plan`."""
    from omegaconf import OmegaConf

    from selector.config import CONF_DIR, ModelConfig, PrecisionConfig, SelectorConfig
    from selector.plan.estimate import planned_weight_bytes

    def shipped(group: str, name: str, schema: type) -> Any:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema),
                                                   OmegaConf.load(CONF_DIR / group / f"{name}.yaml")))

    planned, params = {}, {}
    for model, billions in QWEN:
        for precision, _ in QWEN_PRECISIONS:
            cfg = SelectorConfig(model=shipped("model", model, ModelConfig),
                                 precision=shipped("precision", precision, PrecisionConfig),
                                 cache_dir="/nonexistent", device="cuda")  # fmt: skip
            planned[f"{model}/{precision}"] = planned_weight_bytes(cfg, "cuda")[0]
            params[f"{model}/{precision}"] = billions * 1e9
    return planned, params


def qwen_agreement(draws: int, rng: np.random.Generator, sizes: dict[str, int], floors: dict[str, float]
                   ) -> dict[str, Any]:
    """(b): the qwen ladder under fixed_sequence (rule point): arithmetic decides, each model a little
    further above its floor than the one below it, each precision a little below its bf16, with
    noise; every other task clears its floor. Counts of draws where the search's pick and select()'s
    winner from the same records differ, where the search and the full grid recommend differently,
    and where either has no winner."""
    planned, params = qwen_ladder()
    model_gap = {"qwen2.5-7b": 0.0, "qwen2.5-14b": 0.05, "qwen2.5-32b": 0.10}
    change = dict(QWEN_PRECISIONS)
    counts = dict.fromkeys(("pick differs from select()", "search differs from grid", "no winner (search)",
                            "no winner (grid)"), 0)
    pol = PolicyConfig(floors=dict(floors), rule="point", winner_control="fixed_sequence")
    for _ in range(draws):
        truth = {}
        for name in planned:
            model, precision = name.split("/")
            gap = model_gap[model] + change[precision] + rng.normal(0, 0.04)
            truth[name] = {t: float(np.clip(floors[t] + gap, 0.01, 0.99)) if t == "arithmetic"
                           else min(0.99, floors[t] + 0.25) for t in sizes}  # fmt: skip
        pops = _draw(truth, sizes, rng)
        grid = select(full_records(pops, params, planned), pol).winner
        winner, pick, _ = searched(pops, pol, planned, params, planned, rng)
        counts["pick differs from select()"] += pick != winner
        counts["search differs from grid"] += winner != grid
        counts["no winner (search)"] += winner is None
        counts["no winner (grid)"] += grid is None
    order = sorted(planned, key=lambda n: -planned[n])
    return {"draws": draws, "counts": counts, "planned_gb": {n: round(planned[n] / 1e9, 2) for n in order}}

