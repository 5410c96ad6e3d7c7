"""The dynamic batching scheduler's logic, in front of a scripted stand-in for a model whose
generate() follows transformers' contract (one stopping-criteria call per step, with the tokens so
far) and takes a known time per step, so the timing split can be checked to the millisecond.
The real-model path is tested in tests/integration/test_load_inprocess.py."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from selector.engines.inprocess.batching import BatchingScheduler
from selector.trace import RequestTrace

EOS, PAD = 2, 0
VOCAB = {10: "a", 11: "b", 12: "\n"}


class ScriptedTokenizer:
    pad_token_id, eos_token_id = PAD, EOS

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(VOCAB.get(int(i), "?") for i in ids if int(i) not in (PAD, EOS))


class ScriptedModel:
    """Row r emits SCRIPTS[prompt's last id] token by token, then "a" forever. Prefill takes
    `prefill_s`, each further step `step_s`; `fail` makes the next generate() raise."""

    SCRIPTS = {1: [10, 11, EOS], 2: [10, 12, 11, 11], 3: [10, 11, 10, 11, 10, 11, 10, 11]}

    def __init__(self, prefill_s: float = 0.02, step_s: float = 0.01) -> None:
        self.prefill_s, self.step_s = prefill_s, step_s
        self.generation_config = SimpleNamespace(eos_token_id=EOS)
        self.batches: list[int] = []
        self.fail = False
        self._param = torch.zeros(1)

    def parameters(self) -> Any:
        return iter([self._param])

    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int,
                 stopping_criteria: list[Any], **kwargs: Any) -> torch.Tensor:
        if self.fail:
            self.fail = False
            raise RuntimeError("CUDA out of memory (scripted)")
        self.batches.append(input_ids.shape[0])
        scripts = [self.SCRIPTS[int(row[-1])] for row in input_ids]
        ids = input_ids
        finished = torch.zeros(ids.shape[0], dtype=torch.bool)
        for step in range(max_new_tokens):
            time.sleep(self.prefill_s if step == 0 else self.step_s)
            nxt = [PAD if finished[r] else (s[step] if step < len(s) else 10) for r, s in enumerate(scripts)]
            ids = torch.cat([ids, torch.tensor(nxt).unsqueeze(1)], dim=1)
            done = torch.zeros_like(finished)
            for crit in stopping_criteria:
                done |= crit(ids, None)
            finished |= done | (torch.tensor(nxt) == EOS)
            if bool(finished.all()):
                break
        return ids


Job = tuple[list[int], int, list[str]]  # prompt ids, max new tokens, stop strings


def run(scheduler: BatchingScheduler, jobs: list[Job], gap_s: float = 0.0) -> list[RequestTrace]:
    """Submit jobs (gap_s apart) and wait for all of them."""
    results: list[RequestTrace | None] = [None] * len(jobs)
    left = threading.Semaphore(0)

    def on_done(i: int) -> Any:
        def deliver(t: RequestTrace) -> None:
            results[i] = t
            left.release()
        return deliver

    for i, (ids, max_new, stop) in enumerate(jobs):
        scheduler.submit(ids, max_new, stop, on_done(i))
        if gap_s:
            time.sleep(gap_s)
    for _ in jobs:
        assert left.acquire(timeout=30)
    return results  # type: ignore[return-value]


def closed_loop(scheduler: BatchingScheduler, n: int, script: int = 3, max_new: int = 4) -> list[RequestTrace]:
    return [run(scheduler, [([5, script], max_new, [])])[0] for _ in range(n)]


def test_split_adds_up_and_compute_covers_prefill_and_decode() -> None:
    model = ScriptedModel(prefill_s=0.02, step_s=0.01)
    with BatchingScheduler(model, ScriptedTokenizer(), max_batch_size=4, max_queue_delay_ms=0) as s:
        traces = closed_loop(s, 3, script=3, max_new=4)
    for t in traces:
        assert t.ok and t.output_tokens == 4 and t.text == "abab"
        assert t.queue_ms + t.batch_wait_ms + t.compute_ms == pytest.approx(t.e2e_ms, abs=1e-6)
        # Sleeps only ever overshoot (more so on a busy machine): lower bounds are tight, upper loose.
        assert 20 + 3 * 10 <= t.compute_ms < 20 + 3 * 10 + 60  # prefill + 3 decode steps
        assert 20 <= t.ttft_ms < t.compute_ms
        assert len(t.token_times) == 4 and all(10 <= g < 40 for g in t.itl_gaps_ms)
        assert t.batch_wait_ms < 20 and t.queue_ms < 20


def test_longer_queue_delay_means_longer_batch_wait_when_alone() -> None:
    waits = {}
    for delay_ms in (0.0, 40.0):
        with BatchingScheduler(ScriptedModel(), ScriptedTokenizer(), 4, max_queue_delay_ms=delay_ms) as s:
            traces = closed_loop(s, 3)
        waits[delay_ms] = [t.batch_wait_ms for t in traces]
        for t in traces:
            assert t.queue_ms + t.batch_wait_ms + t.compute_ms == pytest.approx(t.e2e_ms, abs=1e-6)
    assert max(waits[0.0]) < 20
    assert all(39 <= w < 40 + 40 for w in waits[40.0])  # nobody else came: waited out the full delay


def test_requests_that_arrive_while_a_batch_computes_queue_then_batch_together() -> None:
    model = ScriptedModel(prefill_s=0.1, step_s=0.01)
    with BatchingScheduler(model, ScriptedTokenizer(), max_batch_size=4, max_queue_delay_ms=0) as s:
        traces = run(s, [([5, 3], 2, [])] * 6, gap_s=0.01)
    # The first request starts a batch alone; the other five arrive while it computes and are
    # taken together when it ends, four at a time.
    assert model.batches == [1, 4, 1] and s.batch_sizes == [1, 4, 1]
    first, waiting = traces[0], traces[1:5]
    assert first.queue_ms < 20
    for t in waiting:
        assert t.picked >= first.end - 1e-3  # taken only once the running batch finished
        assert t.queue_ms > 20
        assert t.compute_start == waiting[0].compute_start
    assert traces[5].compute_start >= traces[4].end - 1e-3


def test_each_row_stops_on_its_own() -> None:
    model = ScriptedModel(prefill_s=0.01, step_s=0.02)
    with BatchingScheduler(model, ScriptedTokenizer(), max_batch_size=4, max_queue_delay_ms=30) as s:
        eos_row, stop_row, long_row = run(s, [([5, 1], 8, []), ([5, 2], 8, ["\n"]), ([5, 3], 6, [])])
    assert model.batches == [3]
    assert (eos_row.text, eos_row.output_tokens) == ("ab", 2)  # stopped at end-of-sequence (not counted)
    assert (stop_row.text, stop_row.output_tokens) == ("a", 2)  # stop string cut off, its token counted
    assert (long_row.text, long_row.output_tokens) == ("ababab", 6)  # ran to its own budget
    # Delivered when each row finished, not when the batch did.
    assert stop_row.end < eos_row.end < long_row.end
    assert 4 * 20 <= long_row.compute_ms - stop_row.compute_ms < 4 * 20 + 80  # four more steps
    assert {t.compute_start for t in (eos_row, stop_row, long_row)} == {eos_row.compute_start}


def test_a_failed_batch_fails_its_requests_and_the_scheduler_goes_on() -> None:
    model = ScriptedModel()
    with BatchingScheduler(model, ScriptedTokenizer(), max_batch_size=4, max_queue_delay_ms=20) as s:
        model.fail = True
        failed = run(s, [([5, 3], 2, [])] * 2)
        after = run(s, [([5, 3], 2, [])])[0]
    assert all(not t.ok and "out of memory" in t.error for t in failed)
    assert after.ok and after.text == "ab"


def test_drain_drops_queued_requests_and_waits_for_the_running_batch() -> None:
    model = ScriptedModel(prefill_s=0.1, step_s=0.01)
    got: list[RequestTrace] = []
    with BatchingScheduler(model, ScriptedTokenizer(), max_batch_size=1, max_queue_delay_ms=0) as s:
        for _ in range(3):
            s.submit([5, 3], 2, [], got.append)
        time.sleep(0.03)  # the first is computing, two are queued
        assert s.drain(timeout_s=5)
    assert len(got) == 3
    assert sum(t.ok for t in got) == 1 and sum("dropped" in (t.error or "") for t in got) == 2


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="max_batch_size"):
        BatchingScheduler(ScriptedModel(), ScriptedTokenizer(), max_batch_size=0)
    with pytest.raises(ValueError, match="max_queue_delay_ms"):
        BatchingScheduler(ScriptedModel(), ScriptedTokenizer(), max_queue_delay_ms=-1)
