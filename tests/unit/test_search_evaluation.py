"""A variant's evaluation in rounds: items in the seeded order, stored as they are scored, the floors
tested after each task's round, and a later run scoring only what the store does not have.

The scores come from a table of known per-item outcomes (what a model would answer), so the
rounds, the store and the stopping rule run for real on them."""

from __future__ import annotations

from pathlib import Path

import pytest

from selector.config import PolicyConfig
from selector.search.sequential import floor_tests_for_policy
from selector.variant import evaluation
from selector.sweep.searched import savings
from selector.sweep.state import PlannedEntry, SweepState
from selector.tasks.task import Item, Task
from selector.records import MemoryResult, RunRecord, SampleRecord, SearchInfo, Variant


def _task(name: str, n: int, kind: str = "generate") -> Task:
    items = [Item(id=f"{name}-{i}", fields={}, line=i + 1, prompts={"chat": "", "plain": ""}, targets={"chat": "", "plain": ""})
             for i in range(n)]
    return Task(name=name, description="", type=kind, data="", id_field="id", prompt={}, target={}, choices=None,
                choices_field=None, system=None, fewshot_n=0, fewshot_data=None, prompt_style="model",
                prompt_style_overrides={}, target_delimiter=" ", fewshot_delimiter="\n\n", stop={},
                max_new_tokens=8, metric="exact_match", metric_args={}, source=Path("x"), items=items)


class Answers:
    """Scores items from a fixed table, counting what it was asked to score."""

    def __init__(self, right: dict[str, set[str]]) -> None:
        self.right, self.asked = right, []

    def __call__(self, task: Task, ids: list[str]) -> list[SampleRecord]:
        self.asked += ids
        return [SampleRecord(task=task.name, id=i, prompt="", output="", target="",
                             score=float(i in self.right.get(task.name, set()))) for i in ids]


def _stopper(floors: dict[str, float], tasks: list[Task], round_size: int = 12):  # type: ignore[no-untyped-def]
    return floor_tests_for_policy(PolicyConfig(floors=floors), evaluation.task_specs(tasks), 0.05, round_size)


def test_a_variant_far_below_a_floor_stops_after_the_first_round_of_that_task(tmp_path: Path) -> None:
    tasks = [_task("arith", 48), _task("sent", 48, "multiple_choice")]
    answers = Answers({"sent": {f"sent-{i}" for i in range(48)}, "arith": {"arith-0"}})
    store = evaluation.ItemStore(tmp_path, "k1")
    out = evaluation.run(tasks, store, answers, seed=0, round_size=12, stopper=_stopper({"arith": 0.6}, tasks),
                         strategy="adaptive")
    assert out.decision is not None and out.decision.task == "arith"
    # the cheap multiple-choice task's round first, then arithmetic's, and then it stops
    assert out.info.items_evaluated == 24 and out.info.items_total == 96
    assert len(answers.asked) == 24 and "arith" in out.info.stopped_by
    order = evaluation.evaluation_orders(tasks, 0)
    assert list(out.samples["arith"]) == order["arith"][:12]  # the seeded order's first round


def test_a_variant_that_passes_sees_every_item_and_a_rerun_scores_nothing_again(tmp_path: Path) -> None:
    tasks = [_task("arith", 30)]
    answers = Answers({"arith": {f"arith-{i}" for i in range(30)}})
    store = evaluation.ItemStore(tmp_path, "k2")
    first = evaluation.run(tasks, store, answers, seed=0, round_size=12, stopper=_stopper({"arith": 0.6}, tasks))
    assert first.decision is None and first.info.items_evaluated == 30 and len(answers.asked) == 30
    again = Answers({"arith": set()})
    second = evaluation.run(tasks, store, again, seed=0, round_size=None)
    assert again.asked == [] and second.info.items_reused == 30
    assert {i: s.score for i, s in second.samples["arith"].items()} == {f"arith-{i}": 1.0 for i in range(30)}


def test_a_grid_run_after_an_early_stop_scores_only_the_missing_items(tmp_path: Path) -> None:
    tasks = [_task("arith", 48)]
    store = evaluation.ItemStore(tmp_path, "k3")
    stopped = evaluation.run(tasks, store, Answers({}), seed=0, round_size=12,
                             stopper=_stopper({"arith": 0.6}, tasks))
    assert stopped.decision is not None and stopped.info.items_evaluated == 12
    rest = Answers({})
    full = evaluation.run(tasks, store, rest, seed=0, round_size=None)
    assert len(rest.asked) == 36 and full.info.items_reused == 12 and full.info.items_evaluated == 48
    # ... and an adaptive re-run decides from the store alone, before any model would load
    order = evaluation.evaluation_orders(tasks, 0)
    seen = {"arith": store.load("arith")}
    decision = evaluation.decide_from_store(_stopper({"arith": 0.6}, tasks), order, seen, None, 12)
    assert decision is not None and decision.reject


def test_the_store_survives_a_line_cut_short_by_a_crash(tmp_path: Path) -> None:
    store = evaluation.ItemStore(tmp_path, "k4")
    store.append("t", [SampleRecord(task="t", id="a", prompt="", output="", target="", score=1.0)])
    with (store.dir / "t.jsonl").open("a") as f:
        f.write('{"task": "t", "id": "b", "pro')  # the worker died mid-write
    assert list(store.load("t")) == ["a"]


def test_only_whole_rounds_from_the_store_decide(tmp_path: Path) -> None:
    """A crash mid-round leaves a partial round: the early decision must not use it, so the run
    that follows reaches the same decision at the same look."""
    tasks = [_task("arith", 48)]
    order = evaluation.evaluation_orders(tasks, 0)
    partial = {"arith": {i: SampleRecord(task="arith", id=i, prompt="", output="", target="", score=0.0)
                         for i in order["arith"][:11]}}
    assert evaluation.decide_from_store(_stopper({"arith": 0.6}, tasks), order, partial, None, 12) is None


def test_the_store_decides_a_finished_fractional_task_on_its_full_set(tmp_path: Path) -> None:
    """The issue's counter-example read back from the store: a 48-item F1 task at 29/48 (floor 0.6,
    alpha 0.05 over three floors), whose betting wealth crosses 1/alpha after the last interim
    look. With every item stored the full set decides: it passes, so nothing stops it."""
    tasks = [_task("f1", 48), _task("a", 48), _task("b", 48)]
    tasks[0].metric = "f1"
    order = evaluation.evaluation_orders(tasks, 0)
    scores = [float(c) for c in "000101110010000010111001101101110110011111111111"]
    seen = {t.name: {i: SampleRecord(task=t.name, id=i, prompt="", output="", target="", score=1.0)
                     for i in order[t.name]} for t in tasks}
    seen["f1"] = {i: SampleRecord(task="f1", id=i, prompt="", output="", target="", score=s)
                  for i, s in zip(order["f1"], scores)}
    stopper = _stopper({"f1": 0.6, "a": 0.6, "b": 0.6}, tasks)
    assert not next(t for t in stopper.tests if t.task == "f1").binary
    assert evaluation.decide_from_store(stopper, order, seen, None, 12) is None
    seen["f1"][order["f1"][-1]] = seen["f1"][order["f1"][-1]].model_copy(update={"score": 0.0})
    seen["f1"][order["f1"][-2]] = seen["f1"][order["f1"][-2]].model_copy(update={"score": 0.0})
    decision = evaluation.decide_from_store(stopper, order, seen, None, 12)  # 27/48 < 60%: exact
    assert decision is not None and decision.task == "f1" and decision.certain


def _record(name: str, status: str, timings: dict[str, float], items: tuple[int, int] | None = None) -> RunRecord:
    model, precision = name.split("/")
    search = SearchInfo(strategy="adaptive", items_evaluated=items[0], items_total=items[1]) if items else None
    return RunRecord(key=name, variant=Variant(model=model, precision=precision), status=status,  # type: ignore[arg-type]
                     timings_s=timings, search=search, memory=MemoryResult(weight_bytes=1))


def test_the_grid_estimate_scales_a_stopped_evaluation_and_prices_a_pruned_variant() -> None:
    records = [
        _record("m/int4", "stopped", {"load": 10, "evaluate": 20}, (20, 100)),
        _record("m/int8", "completed", {"load": 10, "evaluate": 100, "fidelity": 5, "measure": 15}, (100, 100)),
        _record("m/bf16", "not_needed", {}),
    ]
    state = SweepState(variants=[PlannedEntry(name=r.name, planned_bytes=1.0) for r in records])
    s = savings(records, state)
    assert s["spent_s"] == 160  # 30 + 130
    # int4: 10 load + 20 x 100/20 evaluation + 20 (int8's fidelity and measure); int8: 130; bf16: int8's 130
    assert s["grid_estimate_s"] == pytest.approx(10 + 100 + 20 + 130 + 130)
    assert s["items_evaluated"] == 120 and s["grid_items"] == 300


def test_the_item_order_seed_is_drawn_once_per_eval_set_and_folder_and_can_be_fixed(tmp_path: Path) -> None:
    from selector.report.search_view import order_seed_line
    from selector.sweep import order_seed

    first, how = order_seed.resolve(None, 0, False, tmp_path, "hash-a")
    assert how == "drawn" and 0 <= first < 2**31
    assert order_seed.resolve(None, 0, False, tmp_path, "hash-a") == (first, "kept")  # no second chance
    other = {order_seed.resolve(None, 0, False, tmp_path / f"o{i}", "hash-a")[0] for i in range(5)}
    assert len(other) > 1  # output folders draw independently
    assert order_seed.resolve(7, 0, False, tmp_path, "hash-a") == (7, "search.seed")
    assert order_seed.resolve(None, 3, True, tmp_path, "hash-a") == (3, "seed")
    assert "replay it with search.seed=7" in order_seed_line(7, "search.seed")


def test_a_run_records_the_order_seed_it_was_scored_in(tmp_path: Path) -> None:
    tasks = [_task("arith", 24)]
    out = evaluation.run(tasks, evaluation.ItemStore(tmp_path, "k9"), Answers({}), seed=12345, round_size=None)
    assert out.info.order_seed == 12345
    assert list(out.samples["arith"]) == evaluation.evaluation_orders(tasks, 12345)["arith"]


# ---- a score that is not a score (issue 36, point 7) ----


class BadAt(Answers):
    """Scores like Answers, but the metric returns `bad` for one item: the error evaluate_task raises."""

    def __init__(self, right: dict[str, set[str]], item: str, bad: object) -> None:
        super().__init__(right)
        self.item, self.bad = item, bad

    def __call__(self, task: Task, ids: list[str]) -> list[SampleRecord]:
        from selector.tasks.metrics import InvalidScoreError

        scored = super().__call__(task, ids)
        if self.item in ids:
            before = scored[: ids.index(self.item)]
            raise InvalidScoreError(task.name, self.item, "custom", self.bad, kept=before)
        return scored


def test_an_invalid_score_fails_the_variant_and_keeps_every_item_scored_before_it(tmp_path: Path) -> None:
    from selector.tasks.metrics import InvalidScoreError

    tasks = [_task("arith", 24), _task("sent", 24, "multiple_choice")]
    order = evaluation.evaluation_orders(tasks, 0)
    bad = order["arith"][5]
    store = evaluation.ItemStore(tmp_path, "k-bad")
    answers = BadAt({"arith": set(order["arith"]), "sent": set(order["sent"])}, bad, float("nan"))
    with pytest.raises(InvalidScoreError, match=f"item '{bad}': metric 'custom' returned nan"):
        evaluation.run(tasks, store, answers, seed=0, round_size=12, stopper=_stopper({"arith": 0.6}, tasks))
    assert set(store.load("sent")) == set(order["sent"][:12])  # the cheap task's round, scored first
    assert list(store.load("arith")) == order["arith"][:5]  # the five before the bad one, nothing else
    again = Answers({"arith": set(order["arith"]), "sent": set(order["sent"])})
    evaluation.run(tasks, store, again, seed=0, round_size=None)  # a fixed metric scores only what is missing
    assert len(again.asked) == 48 - 12 - 5


def test_the_store_never_writes_a_nan_and_rereads_an_older_null_as_unscored(tmp_path: Path, caplog) -> None:
    from selector.tasks.metrics import InvalidScoreError

    store = evaluation.ItemStore(tmp_path, "k-null")
    with pytest.raises(InvalidScoreError):
        store.append("t", [SampleRecord(task="t", id="a", prompt="", output="", target="", score=float("nan"))])
    store.append("t", [SampleRecord(task="t", id="a", prompt="", output="", target="", score=1.0)])
    with (store.dir / "t.jsonl").open("a") as f:  # what an older version wrote for a NaN
        f.write('{"task": "t", "id": "b", "prompt": "", "output": "", "target": "", "score": null}\n')
        f.write('{"task": "t", "id": "c", "prom')  # and a line a crash cut short
    assert list(store.load("t")) == ["a"]
    assert "t.jsonl:2: not a scored item" in caplog.text and "t.jsonl:3" not in caplog.text
