"""The in-process engine's fast path (static KV cache + torch.compile'd decode step) changes speed,
not answers, and its compile time never lands in a latency figure.

torch.compile really runs here: on CPU through inductor and the system C++ compiler
(engine.compile=on; auto leaves CPU alone). A cold compile of the tiny model takes 15-35 s on two
cores, a warm one (inductor's on-disk cache) a few seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from selector.config import LatencyConfig, ThroughputConfig
from selector.generation import GenerationRequest
from selector.engines.inprocess.fast import BUCKET, CompileError, FastPath, bucket, compile_setting
from selector.engines.inprocess.evaluator import TransformersEvaluator
from selector.errors import ConfigError
from selector.measure.latency import measure_latency, measure_throughput
from tests.factories import inprocess
from tests.sweep_helpers import run_in_process

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

FEWSHOT = [{"role": "system", "content": "Answer with one word."},
           {"role": "user", "content": "Terrible service, cold soup, never again."},
           {"role": "assistant", "content": "negative"}]
QUESTIONS = ["What is 12 plus 30?", "Bob bought 3 apples and 4 pears. How many fruits in all, Bob?",
             "Order 4521", "Alice lives in Paris and works at the museum on 2021-03-14. Where?"]


def load(model_dir: Path):  # type: ignore[no-untyped-def]
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    return model, transformers.AutoTokenizer.from_pretrained(model_dir)


def test_compile_setting_reads_yaml_booleans_and_refuses_typos() -> None:
    assert [compile_setting(v) for v in ("auto", "on", "off", "ON", True, False, "true")] == \
        ["auto", "on", "off", "on", "on", "off", "on"]
    with pytest.raises(ConfigError, match="compile.*auto, on, off"):
        compile_setting("fast")
    assert bucket(1) == bucket(BUCKET) == BUCKET and bucket(BUCKET + 1) == 2 * BUCKET


def test_auto_leaves_cpu_on_the_plain_path(tiny_model_dir: Path) -> None:
    model, _ = load(tiny_model_dir)
    fast = FastPath(model, "auto")
    assert not fast.active and fast.compile_s == 0.0 and "cpu" in fast.note


def test_greedy_generations_are_identical_with_compile_on_and_off(tiny_model_dir: Path) -> None:
    model, tok = load(tiny_model_dir)
    plain = TransformersEvaluator(model, tok, batch_size=3, min_shared_prefix=0, compile="off")
    fast = TransformersEvaluator(model, tok, batch_size=3, min_shared_prefix=0, compile="on")
    prompts = [FEWSHOT + [{"role": "user", "content": q}] for q in QUESTIONS] + ["What is 12 plus 30? The answer is"]
    free = [GenerationRequest(prompt=p, max_new_tokens=10) for p in prompts]
    base = plain.generate(free)
    assert len({g.text for g in base}) > 1 and all(g.output_tokens == 10 for g in base)  # nothing stopped early

    # A stop string from one row's output and an end token from another's: rows stop on their own.
    stop = base[0].text[3:6]
    row1 = plain.encode(prompts[1])
    eos_at = plain.model.generate(input_ids=torch.tensor([row1]), attention_mask=torch.ones(1, len(row1), dtype=torch.long),
                                  max_new_tokens=10, do_sample=False, pad_token_id=plain.pad_id)[0, len(row1) + 4].item()
    for engine in (plain, fast):
        engine.eos_ids = [*engine.eos_ids, eos_at]
    stopping = [GenerationRequest(prompt=p, max_new_tokens=10, stop=[stop]) for p in prompts]
    want, got = plain.generate(stopping), fast.generate(stopping)
    assert [g.text for g in got] == [g.text for g in want]
    assert [g.output_tokens for g in got] == [g.output_tokens for g in want]
    again = fast.generate(stopping)  # the same shapes: their caches are reused, zeroed
    assert [g.text for g in again] == [g.text for g in want]
    assert min(g.output_tokens for g in want) < 10  # early stops happened, per row

    assert fast.fast.active and fast.fast.compile_s > 0 and getattr(model, "_compiled_call", None) is not None
    assert fast.fast._warm == {(3, BUCKET), (2, BUCKET)}  # batches of 3 and 2 rows: one shape each

    # With a shared prefix, batches keep the prefix's dynamic cache: still the same answers.
    shared = TransformersEvaluator(model, tok, batch_size=3, min_shared_prefix=4, compile="on")
    assert [g.text for g in shared.generate(stopping[:4])] == [g.text for g in want[:4]]


def test_compile_time_stays_out_of_latency_and_throughput(tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A cold compile (no graphs from earlier tests, no inductor cache): seconds, far above any run.
    torch._dynamo.reset()
    monkeypatch.setattr(torch._inductor.config, "fx_graph_cache", False)
    model, tok = load(tiny_model_dir)
    running = inprocess(model, tok, compile="on")  # timed through its batcher, which generates on the fast path
    fast = running.hf.fast
    latency = measure_latency(running, LatencyConfig(warmup=0, repeats=3, prompt_tokens=24, new_tokens=6))
    points = measure_throughput(running, ThroughputConfig(batch_sizes=[2], prompt_tokens=24, new_tokens=6, repeats=1))
    assert fast._warm == {(1, BUCKET), (2, BUCKET)}  # every timed shape was compiled before it was timed
    assert running.info().compiled and running.info().compile_s == fast.compile_s
    # Even with no warm-up runs asked for, no timed run paid for compiling.
    assert latency.e2e_ms.p99 * 5 < fast.compile_s * 1e3
    assert points[0].wall_s * 5 < fast.compile_s
    assert latency.tpot_ms.p50 > 0 and latency.output_tokens == 6


@pytest.mark.slow
def test_sweep_records_compile_time_apart_and_a_failing_compile_fails_only_its_variants(
        tiny_setup: dict[str, Path], tmp_path: Path) -> None:
    # search=grid: this tests compiling, not the search (which would stop a variant that fails a floor).
    quick = ("measure=quick", "measure.fidelity=false", "evalset.tasks=[arithmetic]", "evalset.limit=2", "search=grid")
    done = run_in_process(tiny_setup, "model=tiny", "precision=fp32", "engine.compile=on", *quick)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    (path,) = tiny_setup["out"].glob("sweeps/*/tiny/fp32/record.json")
    record = json.loads(path.read_text())
    assert record["status"] == "completed", record.get("reason")
    perf = record["perf"]
    assert perf["compiled"] is True and perf["compile_s"] > 0
    assert perf["latency"]["e2e_ms"]["p99"] < perf["compile_s"] * 1e3
    assert record["config"]["engine"]["compile"] == "on"

    from tests.sweep_helpers import mlflow_runs

    _, (child,) = mlflow_runs(tiny_setup["out"])
    assert child.data.metrics["time/compile_s"] == pytest.approx(perf["compile_s"])
    assert child.data.params["compiled"] == "True" and child.data.params["engine_compile"] == "on"

    # No working C++ compiler: inductor cannot build its kernels. Both variants fail with that
    # cause, the second still runs after the first failed, and the sweep itself ends normally.
    env = {"CXX": "/bin/false", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "empty-inductor-cache")}
    failed = run_in_process(tiny_setup, "model=tiny", "precision=fp32,bf16", "engine.compile=on", "force=true",
                            "tracker=none", *quick, env=env)
    assert failed.returncode == 0, failed.stderr[-5000:]
    for precision in ("fp32", "bf16"):
        paths = sorted(tiny_setup["out"].glob(f"sweeps/*/tiny/{precision}/record.json"), key=os.path.getmtime)
        record = json.loads(paths[-1].read_text())
        assert record["status"] == "failed"
        # arithmetic's prompts share their few-shot prefix, so evaluation ran the plain path and
        # the first compile was the latency measurement's.
        assert record["reason"].startswith("CompileError in measure: engine.compile=on: torch.compile failed on cpu")
        assert "C++ compiler" in record["reason"]


def test_compile_on_raises_a_typed_error_naming_the_cause(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Inside this process the compiler is already chosen; a child with a broken one shows the error."""
    code = (
        "import torch, transformers\n"
        "from selector.engines.inprocess.fast import FastPath, CompileError\n"
        f"m = transformers.AutoModelForCausalLM.from_pretrained({str(tiny_model_dir)!r}).eval()\n"
        "x = torch.tensor([[5, 6, 7]])\n"
        "try:\n"
        "    FastPath(m, 'on').warm(x, 3, 0)\n"
        "except CompileError as e:\n"
        "    print('CompileError:', e)\n"
    )
    env = {**os.environ, "CXX": "/bin/false", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
                          cwd=Path(__file__).resolve().parents[2])
    assert "CompileError: engine.compile=on: torch.compile failed on cpu" in done.stdout, done.stderr[-3000:]
    assert "C++ compiler" in done.stdout
    assert CompileError.__mro__[1] is RuntimeError  # not a UserError: the variant fails, the sweep goes on
