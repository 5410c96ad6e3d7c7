"""A stand-in for `vllm serve`. It is NOT vLLM: the tests of the happy paths run real vLLM
(tests/integration/test_vllm_engine.py); this is kept for faults a real server cannot be made to
produce on demand (--die-after-streams: exit mid load test; --malformed-metrics).

It answers the parts of vLLM's OpenAI-compatible server that selector uses, in vLLM's shapes, with
a transformers model on CPU: GET /health, GET /v1/models, POST /v1/completions (with `echo` and
`logprobs`: prompt-token log-probabilities and `text_offset`, the first prompt token's value
None), POST /v1/chat/completions (streamed or not, with the usage chunk), and GET /metrics in
Prometheus text with vLLM's metric names and labels (`model_name`, `engine`): the
`vllm:request_queue_time_seconds` / `vllm:request_inference_time_seconds` histograms the load
test's queue / compute split reads, and TTFT, e2e, prefill, decode, token counters and the
running / waiting gauges besides.

What differs from vLLM: one request computes at a time (first come, first served), so under
concurrency requests wait in the queue, where vLLM would batch them; decoding is greedy whatever
the temperature; no paged attention, no prefix caching.

    python tests/vllm_standin.py serve MODEL_DIR --host 127.0.0.1 --port 8000 --dtype float32 \
        --served-model-name variant --max-logprobs 20 --disable-uvicorn-access-log

Each request is logged on stdout as one line, `request <endpoint> stream=<bool> echo=<bool>`, so
a test can count what reached the server.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

# At module level: FastAPI resolves the handlers' (string) annotations in this module's namespace.
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

# vLLM's bucket edges (seconds) for its request timing histograms and TTFT.
REQUEST_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                   120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
TPOT_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0]


class Fifo:
    """One request computes at a time; the others wait in arrival order."""

    def __init__(self) -> None:
        self.cv = threading.Condition()
        self.waiting: deque[object] = deque()
        self.busy = False

    def acquire(self) -> None:
        me = object()
        with self.cv:
            self.waiting.append(me)
            self.cv.wait_for(lambda: not self.busy and self.waiting[0] is me)
            self.waiting.popleft()
            self.busy = True

    def release(self) -> None:
        with self.cv:
            self.busy = False
            self.cv.notify_all()


class Metrics:
    def __init__(self, served: str) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        labels = {"model_name": served, "engine": "0"}
        names = list(labels)

        def hist(name: str, doc: str, buckets: list[float]) -> Any:
            return Histogram(name, doc, names, buckets=buckets, registry=self.registry).labels(**labels)

        def gauge(name: str, doc: str) -> Any:
            return Gauge(name, doc, names, registry=self.registry).labels(**labels)

        def counter(name: str, doc: str) -> Any:
            return Counter(name, doc, names, registry=self.registry).labels(**labels)

        self.running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
        self.waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        self.success = Counter("vllm:request_success", "Count of successfully processed requests.",
                               [*names, "finished_reason"], registry=self.registry)
        self.labels = labels
        self.ttft = hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS)
        self.tpot = hist("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.",
                         TPOT_BUCKETS)
        self.e2e = hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                        REQUEST_BUCKETS)
        self.queue = hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
                          REQUEST_BUCKETS)
        self.inference = hist("vllm:request_inference_time_seconds",
                              "Histogram of time spent in RUNNING phase for request.", REQUEST_BUCKETS)
        self.prefill = hist("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
                            REQUEST_BUCKETS)
        self.decode = hist("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
                           REQUEST_BUCKETS)

    def text(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


@dataclass
class Run:
    """One request: its clock readings and output, as vLLM's request stats keep them."""

    prompt_ids: list[int]
    want_logprobs: bool = False  # prompt and sampled tokens' log-probabilities (echo + logprobs)
    arrival: float = field(default_factory=time.perf_counter)
    started: float = 0.0
    first_token: float = 0.0
    finished: float = 0.0
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str = "length"
    logprobs: list[tuple[float, int, float]] = field(default_factory=list)  # per token after the first:
    # (its log-probability, the top token, the top token's log-probability)

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_ids)


class Server:
    def __init__(self, model_dir: str, dtype: str, served: str, max_logprobs: int, token_delay_s: float = 0.0) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.tok = AutoTokenizer.from_pretrained(model_dir)
        dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": "auto"}
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtypes[dtype]).eval()
        eos = self.model.generation_config.eos_token_id
        self.eos = set([eos] if isinstance(eos, int) else list(eos or [self.tok.eos_token_id]))
        self.served, self.root, self.max_logprobs = served, model_dir, max_logprobs
        self.fifo, self.metrics = Fifo(), Metrics(served)
        self.token_delay_s = token_delay_s  # a known service time per token (capacity tests)

    # ---- the model ---------------------------------------------------------------------------
    def run(self, run: Run, max_tokens: int, stops: list[str]) -> Iterator[str]:
        """Greedy decoding; yields new text as it becomes final (text that could still turn into a
        stop string is held back, and a stop string is never sent, as in vLLM)."""
        torch = self.torch
        self.metrics.waiting.inc()
        self.fifo.acquire()
        self.metrics.waiting.dec()
        self.metrics.running.inc()
        run.started = time.perf_counter()
        sent, hold = 0, max((len(s) for s in stops), default=1) - 1
        try:
            # Each step in inference mode of its own: a streamed response resumes this generator on
            # whichever worker thread is free, and inference mode is per thread.
            past, ids = None, torch.tensor([run.prompt_ids])
            while len(run.tokens) < max_tokens:
                with torch.inference_mode():
                    out = self.model(input_ids=ids, past_key_values=past, use_cache=True)
                past = out.past_key_values
                logp = torch.log_softmax(out.logits[0].float(), dim=-1)  # the prefill gives every prompt position
                token = int(logp[-1].argmax())
                if run.want_logprobs:
                    steps = logp if not run.tokens else logp[-1:]
                    run.logprobs += [(float(row[t]), int(row.argmax()), float(row.max()))
                                     for row, t in zip(steps, [*ids[0, 1:].tolist(), token])]
                if not run.tokens:
                    run.first_token = time.perf_counter()
                if token in self.eos:
                    run.finish_reason = "stop"
                    break
                run.tokens.append(token)
                if self.token_delay_s:
                    time.sleep(self.token_delay_s)  # holding the FIFO: the next request waits too
                ids = torch.tensor([[token]])
                text = self.tok.decode(run.tokens, skip_special_tokens=True)
                cut = min((text.find(s) for s in stops if s in text), default=-1)
                if cut >= 0:
                    run.text, run.finish_reason = text[:cut], "stop"
                    break
                run.text = text
                if len(text) - hold > sent:
                    yield text[sent : len(text) - hold]
                    sent = len(text) - hold
            if len(run.text) > sent:
                yield run.text[sent:]
        finally:
            run.finished = time.perf_counter()
            self.metrics.running.dec()
            self.fifo.release()
            self.record(run)

    def record(self, run: Run) -> None:
        m = self.metrics
        first = run.first_token or run.finished
        m.queue.observe(run.started - run.arrival)
        m.inference.observe(run.finished - run.started)
        m.prefill.observe(first - run.started)
        m.decode.observe(run.finished - first)
        m.e2e.observe(run.finished - run.arrival)
        m.ttft.observe(first - run.arrival)
        if len(run.tokens) > 1:
            m.tpot.observe((run.finished - first) / (len(run.tokens) - 1))
        m.prompt_tokens.inc(run.prompt_tokens)
        m.generation_tokens.inc(len(run.tokens))
        m.success.labels(**m.labels, finished_reason=run.finish_reason).inc()

    def echo_logprobs(self, run: Run, prompt: str) -> dict[str, Any]:
        """vLLM's `logprobs` for echo: every prompt token (the first has None) then the sampled
        ones, with their top alternative and the character offset where each starts."""
        ids = [*run.prompt_ids, *run.tokens]
        tokens, values, tops, offsets = [], [], [], []
        for i, t in enumerate(ids):
            piece = self.tok.decode([t])
            if i <= len(run.prompt_ids):
                offsets.append(len(self.tok.decode(ids[:i])))
            else:
                offsets.append(len(prompt) + len(self.tok.decode(run.tokens[: i - len(run.prompt_ids)])))
            tokens.append(piece)
            if i == 0 or i - 1 >= len(run.logprobs):
                values.append(None)
                tops.append(None)
                continue
            value, best, best_value = run.logprobs[i - 1]
            values.append(value)
            tops.append({self.tok.decode([best]): best_value, piece: value})
        return {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops, "text_offset": offsets}


@dataclass
class Faults:
    """What a real vLLM cannot be made to do on demand, for the fault tests."""

    die_after_streams: int | None = None  # exit the process when this many streamed requests were taken
    malformed_metrics: bool = False  # /metrics answers text that is not Prometheus exposition
    streams: int = 0


MALFORMED_METRICS = 'vllm:request_queue_time_seconds_bucket{le="0.3" model_name=\n garbage 1 2 3\n'


def build_app(server: Server, faults: Faults | None = None) -> Any:
    faults = faults or Faults()
    app = FastAPI()

    def log(endpoint: str, body: dict[str, Any]) -> None:
        print(f"request {endpoint} stream={bool(body.get('stream'))} echo={bool(body.get('echo'))}", flush=True)

    def check_model(body: dict[str, Any]) -> None:
        if body.get("model") not in (None, server.served):
            raise HTTPException(404, f"The model `{body.get('model')}` does not exist.")

    def usage(run: Run) -> dict[str, int]:
        return {"prompt_tokens": run.prompt_tokens, "completion_tokens": len(run.tokens),
                "total_tokens": run.prompt_tokens + len(run.tokens)}

    def options(body: dict[str, Any]) -> tuple[int, list[str]]:
        stop = body.get("stop") or []
        return int(body.get("max_tokens") or body.get("max_completion_tokens") or 16), \
            [stop] if isinstance(stop, str) else list(stop)

    def stream(run: Run, body: dict[str, Any], base: dict[str, Any], choice: Any) -> StreamingResponse:
        """Server-sent events: one chunk per piece of text, the finish reason, the usage, [DONE].
        The model runs in the response's worker thread, so waiting for it never blocks the server."""
        faults.streams += 1
        if faults.die_after_streams is not None and faults.streams > faults.die_after_streams:
            print(f"vllm stand-in: dying as asked, at streamed request {faults.streams}", flush=True)
            os._exit(3)

        async def lines() -> AsyncIterator[str]:
            # As vLLM aborts a request whose client went away: a cancelled stream closes the
            # generator (its `finally` frees the FIFO) instead of leaving it suspended, holding it.
            pieces = server.run(run, *options(body))
            try:
                while (piece := await run_in_threadpool(next, pieces, None)) is not None:
                    yield f"data: {json.dumps({**base, 'choices': [choice(piece, None)]})}\n\n"
            finally:
                await run_in_threadpool(pieces.close)
            yield f"data: {json.dumps({**base, 'choices': [choice('', run.finish_reason)]})}\n\n"
            if (body.get("stream_options") or {}).get("include_usage"):
                yield f"data: {json.dumps({**base, 'choices': [], 'usage': usage(run)})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(lines(), media_type="text/event-stream")

    async def complete(run: Run, body: dict[str, Any]) -> None:
        await run_in_threadpool(lambda: [None for _ in server.run(run, *options(body))])

    @app.get("/health")
    def health() -> Response:
        return Response(status_code=200)

    @app.get("/metrics")
    def metrics() -> Response:
        text = MALFORMED_METRICS if faults.malformed_metrics else server.metrics.text()
        return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": server.served, "object": "model", "owned_by": "vllm",
                                            "root": server.root, "max_model_len": server.model.config.max_position_embeddings}]}

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        body = await request.json()
        log("completions", body)
        check_model(body)
        prompt = body["prompt"]
        if not isinstance(prompt, str):
            raise HTTPException(400, "this stand-in takes one prompt string per request")
        want = body.get("logprobs")
        if want is not None and int(want) > server.max_logprobs:
            raise HTTPException(400, f"Requested sample logprobs of {want}, which is greater than max allowed: "
                                     f"{server.max_logprobs}")
        run = Run(server.tok(prompt)["input_ids"], want_logprobs=want is not None and bool(body.get("echo")))
        base = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": server.served}
        if body.get("stream"):
            return stream(run, body, base, lambda text, why: {"index": 0, "text": text, "logprobs": None,
                                                              "finish_reason": why})
        await complete(run, body)
        echo = body.get("echo")
        logprobs = server.echo_logprobs(run, prompt) if run.want_logprobs else None
        return JSONResponse({**base, "choices": [{"index": 0, "text": (prompt if echo else "") + run.text,
                                                  "logprobs": logprobs, "finish_reason": run.finish_reason,
                                                  "stop_reason": None}],
                             "usage": usage(run)})

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        log("chat", body)
        check_model(body)
        rendered = server.tok.apply_chat_template(body["messages"], tokenize=False, add_generation_prompt=True)
        run = Run(server.tok(rendered, add_special_tokens=False)["input_ids"])
        base = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk", "created": int(time.time()),
                "model": server.served}
        if body.get("stream"):
            return stream(run, body, base, lambda text, why: {"index": 0, "delta": {"role": "assistant", "content": text},
                                                              "logprobs": None, "finish_reason": why})
        await complete(run, body)
        return JSONResponse({**base, "object": "chat.completion",
                             "choices": [{"index": 0, "message": {"role": "assistant", "content": run.text},
                                          "logprobs": None, "finish_reason": run.finish_reason}],
                             "usage": usage(run)})

    return app


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="vllm", description="a CPU stand-in for `vllm serve` (tests only)")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve")
    serve.add_argument("model")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--dtype", default="auto")
    serve.add_argument("--served-model-name", default=None)
    serve.add_argument("--max-logprobs", type=int, default=20)
    serve.add_argument("--disable-uvicorn-access-log", action="store_true")
    serve.add_argument("--die-after-streams", type=int, default=None)  # a fault: see Faults
    serve.add_argument("--malformed-metrics", action="store_true")  # a fault: see Faults
    serve.add_argument("--token-delay-ms", type=float, default=0.0, help="sleep this long per generated token (tests)")
    args = parser.parse_args(argv)

    import uvicorn

    server = Server(args.model, args.dtype, args.served_model_name or args.model, args.max_logprobs,
                    args.token_delay_ms / 1e3)
    print(f"vllm stand-in: serving {args.model} as {server.served} on {args.host}:{args.port}", flush=True)
    faults = Faults(die_after_streams=args.die_after_streams, malformed_metrics=args.malformed_metrics)
    uvicorn.run(build_app(server, faults), host=args.host, port=args.port, log_level="warning",
                access_log=not args.disable_uvicorn_access_log)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
