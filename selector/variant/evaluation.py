"""A variant's evaluation, item by item, kept and resumable; in rounds when the search may stop it.

Every scored item is appended to the output folder's item store, keyed by the variant's
evaluation key (everything that can change a score, nothing that only changes a measurement), so
a later run of the same variant, in this sweep or another (a grid after an adaptive search, a
lower floor, another serving knob), scores only the items it does not have yet.

Adaptive search (docs/search.md): each task's items are taken in one seeded order (the same for
every variant, so prefixes pair up item by item), `round_size` more of every task per round, and
after each round the floors are tested with an anytime-valid bound (selector.search.sequential).
The grid scores every item of a task in one call, which batches best.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock

from selector.config import SelectorConfig
from selector.records import RunRecord, SampleRecord, SearchInfo
from selector.search.driver import Shortfall
from selector.tasks.metrics import InvalidScoreError, check_score

if TYPE_CHECKING:
    from selector.config import SelectorConfig
    from selector.engines.spec import Running

Evaluate = Callable[[Any, list[str]], list[SampleRecord]]  # (task, item ids) -> scored samples
log = logging.getLogger("selector.variant.evaluation")


class ItemStore:
    """Scored items of one evaluation key: <output>/evaluations/<key>/<task>.jsonl."""

    def __init__(self, output_dir: str | Path, evaluation_key: str) -> None:
        self.dir = Path(output_dir) / "evaluations" / evaluation_key
        self.lock = FileLock(str(self.dir) + ".lock", timeout=600)

    def load(self, task: str) -> dict[str, SampleRecord]:
        path = self.dir / f"{task}.jsonl"
        if not path.exists():
            return {}
        found = {}
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            try:
                data = json.loads(line)
            except ValueError:  # a line cut short by a crash: that item is scored again
                continue
            try:
                record = SampleRecord.model_validate(data)
                check_score(record.score, task, record.id, "stored")
            except (ValueError, InvalidScoreError) as e:  # written by an older version (a NaN stored as null)
                log.warning("%s:%d: not a scored item (%s); it is scored again", path, number, str(e).splitlines()[0])
                continue
            found[record.id] = record
        return found

    def append(self, task: str, records: list[SampleRecord]) -> None:
        if not records:
            return
        for r in records:  # nothing that is not a score is ever written (selector.tasks.metrics.check_score)
            check_score(r.score, task, r.id, "stored")
        self.dir.mkdir(parents=True, exist_ok=True)
        with self.lock, (self.dir / f"{task}.jsonl").open("a", encoding="utf-8") as out:
            out.write("".join(r.model_dump_json() + "\n" for r in records))


@dataclass
class Outcome:
    samples: dict[str, dict[str, SampleRecord]]  # task -> item id -> sample, the items this variant saw
    info: SearchInfo
    decision: Any = None  # selector.search.sequential.Decision, when a floor stopped the variant


def _cost(task: Any) -> tuple[int, int]:
    """Rough cost of a task's items: scoring choices is one forward pass, generation is many."""
    return (task.type == "generate", task.max_new_tokens if task.type == "generate" else 0)


def order_seed_of(cfg: Any) -> int:
    """The item order's seed: the sweep's (search.seed, set by the sweep's start when drawn), else
    `seed` for a variant run outside a sweep (selector.sweep.order_seed)."""
    return cfg.search.seed if cfg.search.seed is not None else cfg.seed


def evaluation_orders(tasks: list[Any], seed: int) -> dict[str, list[str]]:
    """Each task's item ids in the seeded order adaptive search scores them."""
    from selector.search.sequential import evaluation_order

    return {t.name: [t.items[i].id for i in evaluation_order(len(t.items), seed, t.name)] for t in tasks}


def task_specs(tasks: list[Any]) -> dict[str, Any]:
    from selector.search.sequential import TaskSpec
    from selector.tasks import get_metric

    return {t.name: TaskSpec(len(t.items), get_metric(t.metric).higher_is_better, get_metric(t.metric).binary)
            for t in tasks}


def prefix_scores(order: dict[str, list[str]], seen: dict[str, dict[str, SampleRecord]]) -> dict[str, list[float]]:
    """Per task, the scores of the longest run of items from the start of its order that was scored."""
    out = {}
    for task, ids in order.items():
        scores = []
        for item in ids:
            if item not in seen[task]:
                break
            scores.append(seen[task][item].score)
        out[task] = scores
    return out


def decide_from_store(stopper: Any, order: dict[str, list[str]], seen: dict[str, dict[str, SampleRecord]],
                      reference: dict[str, list[float]] | None, round_size: int) -> Any:
    """A rejection from what is already stored, before any model loads (None: the items stored do
    not settle it). Only whole rounds count, so `run` reaches the same decision at the same look."""
    if stopper is None:
        return None
    scores = {}
    for task, values in prefix_scores(order, seen).items():
        whole = len(values) if len(values) == len(order[task]) else len(values) // round_size * round_size
        scores[task] = values[:whole]
    return stopper.check(scores, reference)


def run(tasks: list[Any], store: ItemStore, evaluate: Evaluate, *, seed: int, round_size: int | None,
        stopper: Any = None, reference: dict[str, list[float]] | None = None, strategy: str = "grid") -> Outcome:
    """Score the variant's items, reusing stored ones: in rounds of `round_size` items per task
    with a look at the floors after each (stopper), or every item at once (round_size None)."""
    order = evaluation_orders(tasks, seed)
    seen = {t.name: store.load(t.name) for t in tasks}
    stored = {name: set(items) for name, items in seen.items()}  # scored by an earlier run
    by_name = {t.name: t for t in tasks}
    longest = max(len(ids) for ids in order.values())
    looks = range(round_size, longest + round_size, round_size) if round_size and stopper else [longest]
    decision = None
    used = {name: 0 for name in order}  # items of each task's order this variant has seen
    for look in looks:
        for name in sorted(order, key=lambda n: _cost(by_name[n])):  # the cheap tasks' floors first
            ids = order[name]
            wanted = ids[:look]
            missing = [i for i in wanted if i not in seen[name]]
            if missing:
                try:
                    fresh = evaluate(by_name[name], missing)
                except InvalidScoreError as e:  # the variant fails; the items scored before stay stored
                    store.append(name, e.kept)
                    raise
                store.append(name, fresh)
                seen[name].update((r.id, r) for r in fresh)
            used[name] = len(wanted)
            if stopper is not None:  # a task's look is its own: test as soon as its round is in
                decision = stopper.check(prefix_scores({n: i[: used[n]] for n, i in order.items()}, seen), reference)
                if decision is not None:
                    break
        if decision is not None:
            break
    samples = {name: {i: seen[name][i] for i in ids[: used[name]]} for name, ids in order.items()}
    info = SearchInfo(strategy=strategy, items_evaluated=sum(used.values()),
                      items_total=sum(len(ids) for ids in order.values()),
                      items_reused=sum(len(stored[n] & set(ids[: used[n]])) for n, ids in order.items()),
                      order_seed=seed)
    if decision is not None:
        info.stopped_by, info.task, info.bound, info.level = decision.reason, decision.task, decision.bound, decision.level
        info.floor = decision.floor
    return Outcome(samples, info, decision)


def noise_floor(running: Running, tasks: Any, cfg: SelectorConfig, scored: dict[str, float]) -> dict[str, float]:
    """Score spread per task across evaluations that differ only in batch size (padding and kernel
    choice change the float rounding; a server batches the requests differently); selection warns
    when a verdict rests on less. scored: each task's score from the variant's own evaluation."""
    from selector.tasks import evaluate_task

    nf = cfg.measure.noise_floor
    values = {name: [value] for name, value in scored.items()}
    for repeat in range(nf.repeats):
        engine = running.rebatched(nf.batch_sizes[repeat % len(nf.batch_sizes)])
        for task in tasks:
            result, _ = evaluate_task(engine, task, cfg.model.name, cfg.model.prompt_style)
            values[task.name].append(result.value)
    return {name: round(max(v) - min(v), 6) for name, v in values.items()}


@functools.lru_cache(maxsize=8)
def evalset_of(path: str, tasks: tuple[str, ...] | None, limit: int | None) -> tuple[Any, str]:
    from selector.tasks import evalset_hash, load_evalset

    loaded = load_evalset(path, list(tasks) if tasks else None, limit)
    return loaded, evalset_hash(loaded)


def load_tasks(cfg: SelectorConfig) -> tuple[Any, str]:
    """The eval set's tasks and content hash (loaded once per distinct eval set)."""
    return evalset_of(cfg.evalset.path, tuple(cfg.evalset.tasks) if cfg.evalset.tasks else None, cfg.evalset.limit)


def stopped_shortfall(record: RunRecord) -> Shortfall | None:
    """The anytime bound a variant was stopped with, when a floor (not a margin) stopped it."""
    info = record.search
    if info is None or info.floor is None or info.bound is None or not info.task:
        return None
    result = record.tasks.get(info.task)
    higher = result.higher_is_better if result is not None else True
    return Shortfall(info.task, info.bound, info.floor, higher, anytime=True)
