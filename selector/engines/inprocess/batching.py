"""In-process dynamic batching: a scheduler thread in front of a transformers model.

Requests wait in a queue. The scheduler takes the first one, then keeps taking arrivals until the
batch holds `max_batch_size` requests or `max_queue_delay_ms` has passed since it took the first,
runs that batch to completion (greedy, each row stopping at its own end-of-sequence, stop string or
token budget) and only then looks at the queue again: one batch at a time, as a static batcher does.

Each request's clock readings split its latency three ways:
  queue       arrival -> the scheduler took it (it waited behind a batch that was computing)
  batch wait  taken -> its batch started computing (waiting for the batch to fill up)
  compute     batch start -> its last token (prefill + decode; a row that stops early is
              delivered then, not when the whole batch ends)
so queue + batch wait + compute is its end-to-end latency exactly.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from selector.trace import RequestTrace

log = logging.getLogger("selector.engines.inprocess.batching")

OnDone = Callable[[RequestTrace], None]


@dataclass
class _Pending:
    prompt_ids: list[int]
    max_new_tokens: int
    stop: list[str]
    trace: RequestTrace
    on_done: OnDone
    ignore_eos: bool = False  # a timed run: exactly max_new_tokens, end-of-sequence or not
    tokens: list[int] = field(default_factory=list)
    finished: bool = False


class BatchingScheduler:
    """Serve token-id prompts in dynamic batches on a background thread.

    `submit` never blocks; the callback runs on the scheduler thread, so it must be quick
    (hand the trace to another thread, e.g. with `loop.call_soon_threadsafe`).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        max_batch_size: int = 8,
        max_queue_delay_ms: float = 10.0,
        eos_ids: list[int] | None = None,
        pad_id: int | None = None,
        generate: Callable[..., Any] | None = None,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}")
        if max_queue_delay_ms < 0:
            raise ValueError(f"max_queue_delay_ms must not be negative, got {max_queue_delay_ms}")
        self.model, self.tok = model, tokenizer
        self.max_batch_size, self.max_delay_s = max_batch_size, max_queue_delay_ms / 1e3
        eos = model.generation_config.eos_token_id if eos_ids is None else eos_ids
        self.eos_ids = [eos] if isinstance(eos, int) else list(eos or [tokenizer.eos_token_id])
        self.pad_id = pad_id if pad_id is not None else (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0])
        self.device = next(model.parameters()).device
        # model.generate, or the engine's fast path (a static cache and a compiled decode step)
        self.generate = generate or model.generate
        self._queue: queue.Queue[_Pending | None] = queue.Queue()
        self._idle = threading.Condition()
        self._outstanding = 0  # submitted and not yet delivered
        self._thread: threading.Thread | None = None
        self.batch_sizes: list[int] = []  # every batch run, in order (for tests and diagnostics)

    # ---- lifecycle ------------------------------------------------------------------------
    def start(self) -> BatchingScheduler:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="batching-scheduler", daemon=True)
            self._thread.start()
        return self

    def close(self, timeout_s: float = 60.0) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout_s)
            self._thread = None

    def __enter__(self) -> BatchingScheduler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- requests -------------------------------------------------------------------------
    def submit(self, prompt_ids: list[int], max_new_tokens: int, stop: list[str], on_done: OnDone,
               ignore_eos: bool = False) -> RequestTrace:
        trace = RequestTrace(sent=time.perf_counter(), prompt_tokens=len(prompt_ids))
        with self._idle:
            self._outstanding += 1
        self._queue.put(_Pending(list(prompt_ids), max_new_tokens, list(stop), trace, on_done, ignore_eos))
        return trace

    def drain(self, timeout_s: float = 300.0) -> bool:
        """Drop requests still queued (delivered as errors), wait for the running batch to end.

        A load level cut off by its time limit leaves work behind; draining keeps it out of the
        next level. True when the scheduler went idle within the timeout.
        """
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:  # a close() racing with us: keep it for the loop
                self._queue.put(None)
                break
            self._fail(item, "dropped: the load level ended before this request was scheduled")
        with self._idle:
            return self._idle.wait_for(lambda: self._outstanding == 0, timeout_s)

    # ---- the scheduler thread -------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            first = self._queue.get()  # blocks without spinning
            if first is None:
                return
            batch, closing = self._form_batch(first)
            self._run(batch)
            if closing:
                return

    def _form_batch(self, first: _Pending) -> tuple[list[_Pending], bool]:
        first.trace.picked = time.perf_counter()
        deadline = first.trace.picked + self.max_delay_s
        batch = [first]
        while len(batch) < self.max_batch_size:
            left = deadline - time.perf_counter()
            try:
                # After the delay, still take whatever is already waiting (no extra wait).
                item = self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                return batch, True
            item.trace.picked = time.perf_counter()
            batch.append(item)
        return batch, False

    def _run(self, batch: list[_Pending]) -> None:
        start = time.perf_counter()
        for p in batch:
            p.trace.compute_start = start
        self.batch_sizes.append(len(batch))
        try:
            self._generate(batch)
        except Exception as e:  # one failing batch must not stop the scheduler
            log.exception("batch of %d failed", len(batch))
            for p in batch:
                if not p.finished:
                    self._fail(p, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")

    @torch.inference_mode()
    def _generate(self, batch: list[_Pending]) -> None:
        width = max(len(p.prompt_ids) for p in batch)
        ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, p in enumerate(batch):  # left padding: every row's next token is at the end
            ids[row, width - len(p.prompt_ids) :] = torch.tensor(p.prompt_ids, dtype=torch.long)
            mask[row, width - len(p.prompt_ids) :] = 1
        tracker = _RowTracker(self, batch, width)
        longest = max(p.max_new_tokens for p in batch)
        # A batch of timed runs generates every token it asks for: end-of-sequence is not sampled.
        fixed = {"min_new_tokens": longest} if all(p.ignore_eos for p in batch) else {}
        self.generate(
            input_ids=ids.to(self.device),
            attention_mask=mask.to(self.device),
            max_new_tokens=longest,
            do_sample=False,
            num_beams=1,
            eos_token_id=self.eos_ids,
            pad_token_id=self.pad_id,
            stopping_criteria=[tracker],
            **fixed,
        )
        now = time.perf_counter()
        for p in batch:  # generate() ended (its own token budget): whatever is left is done now
            if not p.finished:
                self._finish(p, now)

    # ---- delivery -------------------------------------------------------------------------
    def _finish(self, p: _Pending, now: float) -> None:
        text = self.tok.decode(p.tokens, skip_special_tokens=True)
        cut = min((text.find(s) for s in p.stop if s in text), default=-1)
        p.trace.text = text[:cut] if cut >= 0 else text
        p.trace.output_tokens = len(p.tokens)
        p.trace.end = now
        self._deliver(p)

    def _fail(self, p: _Pending, why: str) -> None:
        p.trace.error = why
        p.trace.end = time.perf_counter()
        self._deliver(p)

    def _deliver(self, p: _Pending) -> None:
        p.finished = True
        try:
            p.on_done(p.trace)
        except Exception:  # a broken callback is the caller's bug; the scheduler keeps serving
            log.exception("on_done callback failed")
        with self._idle:
            self._outstanding -= 1
            self._idle.notify_all()


class _RowTracker:
    """A stopping criterion that stamps each step and finishes rows one by one.

    generate() calls it after every step with the token just appended, so the clock reading
    here is when that token exists (the `.tolist()` waits for the device).
    """

    def __init__(self, scheduler: BatchingScheduler, batch: list[_Pending], width: int) -> None:
        self.s, self.batch, self.width = scheduler, batch, width
        self.longest_stop = max((len(x) for p in batch for x in p.stop), default=0)

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        last = input_ids[:, -1].tolist()
        now = time.perf_counter()
        done = torch.zeros(len(self.batch), dtype=torch.bool, device=input_ids.device)
        for row, p in enumerate(self.batch):
            if p.finished:
                done[row] = True
                continue
            token = last[row]
            if token in self.s.eos_ids and not p.ignore_eos:  # end of turn: not an output token
                self.s._finish(p, now)
                done[row] = True
                continue
            p.tokens.append(token)
            p.trace.token_times.append(now)
            if len(p.tokens) >= p.max_new_tokens or self._hit_stop(p):
                self.s._finish(p, now)
                done[row] = True
        return done

    def _hit_stop(self, p: _Pending) -> bool:
        if not p.stop:
            return False
        # A stop string is at most `longest_stop` characters, so the last few tokens suffice.
        tail = self.s.tok.decode(p.tokens[-(self.longest_stop + 2) :], skip_special_tokens=True)
        return any(s in tail for s in p.stop)
