"""The load and server configs compose, validate, and their command templates render."""

from __future__ import annotations

import pytest

from selector.compose import compose as _compose
from selector.engines.vllm.engine import VllmConfig
from selector.errors import ConfigError
from selector.engines.served.process import render_command

VALUES = {"model_path": "cache/models/my model", "port": 8123, "host": "127.0.0.1", "dtype": "bfloat16",
          "served_model": "variant"}


@pytest.mark.parametrize("name", ["load", "load-quick"])
def test_measure_load_configs(name: str) -> None:
    cfg = _compose([f"measure={name}"])
    load = cfg.measure.load
    assert load.enabled and load.concurrency and load.requests_per_level > 0 and load.new_tokens > 0
    assert load.max_batch_size >= 1 and load.max_queue_delay_ms >= 0
    assert cfg.measure.latency.enabled  # the rest of the measurements stay as in the config they extend
    slo = _compose([f"measure={name}", "+measure.load.slo.e2e_ms=4000"]).measure.load.slo
    assert slo == {"e2e_ms": 4000.0}


def test_attached_engine_config() -> None:
    engine = _compose(["engine=openai"]).engine
    assert engine.kind == "openai" and engine.batch_size >= 1 and engine.api_key_env is None
    assert engine.base_url and engine.base_url.endswith("/v1")


def test_command_engine_config_renders_its_template() -> None:
    engine = _compose(["engine=openai-transformers"]).engine
    assert engine.kind == "command" and engine.batch_size >= 1 and engine.api_key_env is None
    argv = render_command(engine.server_command, VALUES)
    assert "cache/models/my model" in argv  # one argument, spaces and all
    assert argv[argv.index("--port") + 1] == "8123" and argv[argv.index("--host") + 1] == "127.0.0.1"


@pytest.mark.parametrize("name", ["vllm", "openai-vllm"])  # openai-vllm: the former name, an alias
def test_vllm_engine_builds_its_command_from_the_config(name: str) -> None:
    from selector.engines.vllm.launch import Placement, command, environment

    engine = _compose([f"engine={name}", "engine.vllm.max_num_seqs=4", "engine.vllm.enforce_eager=true",
                       "engine.vllm.args=[--seed,'7']"]).engine
    assert engine.kind == "vllm" and not hasattr(engine, "server_command")
    argv = command(engine.vllm, "/env/bin/python", model_path="cache/models/my model", host="127.0.0.1", port=8123,
                   dtype="bfloat16", served_model="variant")
    assert argv[:3] == ["/env/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--model") + 1] == "cache/models/my model"  # one argument, spaces and all
    assert argv[argv.index("--port") + 1] == "8123" and argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--max-num-seqs") + 1] == "4" and "--max-num-batched-tokens" not in argv
    assert "--enforce-eager" in argv and argv[-2:] == ["--seed", "7"]
    env = environment(engine.vllm, Placement([0, 1], 2))
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2" and env["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"


def test_vllm_knobs_belong_to_vllm() -> None:
    from selector.engines.knobs import check_engine_knobs

    vllm, hf = _compose(["engine=vllm"]), _compose(["engine=hf"])
    check_engine_knobs(vllm, {"engine.vllm.max_num_seqs"}, {"max_num_batched_tokens"})  # its own: fine
    with pytest.raises(ConfigError, match="max_batch_size is a knob of engine=hf, not of engine=vllm; engine=vllm "
                                          "batches with engine.vllm.max_num_seqs"):
        check_engine_knobs(vllm, set(), {"max_batch_size"})
    with pytest.raises(ConfigError, match="max_num_seqs is a knob of engine=vllm, not of engine=hf; engine=hf "
                                          "batches with measure.load.max_batch_size"):
        check_engine_knobs(hf, {"engine.vllm.max_num_seqs"}, set())


def test_vllm_log_says_which_kernel_served_the_weights(tmp_path) -> None:
    from selector.engines.vllm.launch import served_kernel

    log = tmp_path / "server.log"
    log.write_text(  # lines as vllm-cpu 0.32.0 wrote them serving selector's AWQ checkpoint
        "(EngineCore pid=1) INFO [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='m', "
        "dtype=torch.bfloat16, quantization=compressed-tensors, enforce_eager=True\n"
        "(Worker pid=2) INFO [__init__.py:923] Using CPUWNA16LinearKernel for mixed-precision linear\n"
        "(Worker pid=2) INFO [compressed_tensors_wNa16.py:138] Using CPUWNA16LinearKernel for CompressedTensorsWNA16\n")
    assert served_kernel(log) == {"quantization": "compressed-tensors", "kernels": ["CPUWNA16LinearKernel"],
                                  "schemes": ["CompressedTensorsWNA16"], "packed": True}
    log.write_text(  # and its W8A8 checkpoint (int8-w8a8)
        "Initializing a V1 LLM engine (v0.32.0) with config: model='m', quantization=compressed-tensors, x=1\n"
        "(Worker pid=2) INFO [__init__.py:846] Selected CPUInt8ScaledMMLinearKernel for CompressedTensorsW8A8Int8\n")
    assert served_kernel(log) == {"quantization": "compressed-tensors", "kernels": ["CPUInt8ScaledMMLinearKernel"],
                                  "schemes": ["CompressedTensorsW8A8Int8"], "packed": True}
    log.write_text("Initializing a V1 LLM engine (v0.32.0) with config: model='m', quantization=None, x=1\n")
    assert served_kernel(log) == {"quantization": None, "kernels": [], "schemes": [], "packed": None}


def test_served_and_in_process_answers_compared_per_task() -> None:
    from selector.variant.agreement import accuracy_engine, engine_agreement
    from selector.records import SampleRecord

    def sample(task: str, i: int, output: str, score: float) -> SampleRecord:
        return SampleRecord(task=task, id=f"{task}-{i}", prompt="p", output=output, target="t", score=score)

    local = [sample("arith", 1, "42", 1.0), sample("arith", 2, "7", 0.0), sample("mc", 1, "positive", 1.0)]
    served = [sample("arith", 1, " 42\n", 1.0), sample("arith", 2, "8", 1.0), sample("mc", 1, "positive", 1.0),
              sample("mc", 2, "negative", 0.0)]  # mc-2: scored only through the server, not compared
    got = engine_agreement(served, local)
    assert {t: (a.n, a.differ) for t, a in got.items()} == {"arith": (2, 1), "mc": (1, 0)}  # whitespace is no difference
    assert got["arith"].in_process_value == 0.5 and got["arith"].served_value == 1.0
    assert got["arith"].examples == [{"id": "arith-2", "target": "t", "in_process": "7", "served": "8",
                                      "in_process_score": 0.0, "served_score": 1.0}]
    from selector.engines.inprocess.engine import HfEngineConfig, InProcessEngine

    local_engine = InProcessEngine(HfEngineConfig())
    assert accuracy_engine(None, local_engine) == accuracy_engine("vllm", local_engine) == "served"
    assert accuracy_engine("hf", local_engine) == "in_process"
    assert accuracy_engine("transformers", local_engine) == "served"  # `transformers serve`'s name; preflight refuses it unless the sweep runs that
    assert accuracy_engine("hf", None) == "served"  # no in-process comparison: the served answers are all there are


def test_latency_from_engine_vllm_is_named_vllm() -> None:
    from selector.selection.summary import measuring_engine
    from tests.factories import run_record

    record = run_record("m", "bf16")
    record.config = {"engine": {"kind": "vllm"}}
    assert measuring_engine(record) == "vllm"
    # a record written before engines had kinds of their own reads the same
    record.config = {"engine": {"kind": "openai", "server": "vllm", "server_command": None}}
    assert measuring_engine(record) == "vllm"
    record.config = {"engine": {"kind": "openai", "server": None, "base_url": "http://127.0.0.1:8000/v1"}}
    assert measuring_engine(record) is None  # an attached server: whatever serves at that URL
    record.config = {"engine": {"kind": "command", "server_command": "/opt/tgi/bin/text-generation-launcher --port {port}"}}
    assert measuring_engine(record) == "text-generation-launcher"


def test_an_unknown_engine_kind_stops_with_the_known_ones() -> None:
    from selector.engines import ENGINES

    assert {"hf", "vllm", "command", "openai"} <= set(ENGINES.names())
    with pytest.raises(ConfigError) as err:
        _compose(["engine.kind=hff"])
    assert (err.value.where, err.value.field) == ("command line", "engine.kind")
    assert err.value.problem.startswith("unknown engine kind 'hff'. Did you mean 'hf'? Known: ")


def test_a_setting_its_engine_kind_lacks_names_the_kind_that_has_it() -> None:
    with pytest.raises(ConfigError) as err:
        _compose(["engine.max_num_seqs=4"])
    assert (err.value.where, err.value.field) == ("command line", "engine.max_num_seqs")
    assert "engine.vllm.max_num_seqs is a setting of engine=vllm" in err.value.problem
    with pytest.raises(ConfigError) as err:
        _compose(["engine=vllm", "engine.vllm.max_num_seq=4"])
    assert err.value.field == "engine.vllm.max_num_seq"
    assert "Did you mean engine.vllm.max_num_seqs?" in err.value.problem
    with pytest.raises(ConfigError) as err:
        _compose(["engine=vllm", "engine.base_url=http://x"])
    assert "It is a setting of engine kind openai" in err.value.problem
    with pytest.raises(ConfigError) as err:
        _compose(["engine=vllm", "engine.vllm.instances=0"])
    assert (err.value.field, err.value.problem) == ("engine.vllm.instances", "must be at least 1, got 0")
    with pytest.raises(ConfigError) as err:  # vLLM's CPU build takes whole GiB only (it failed at start on 0.5)
        _compose(["engine=vllm", "engine.vllm.kv_cache_gib=0.5"])
    assert err.value.field == "engine.vllm.kv_cache_gib" and "a whole number of GiB" in err.value.problem


def test_vllm_instances_split_the_cores_evenly_and_need_one_each(monkeypatch) -> None:
    from selector.engines.vllm import launch as vllm
    from selector.engines.vllm.launch import Placement

    monkeypatch.setattr(vllm.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 6, 7})
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert vllm.placements(None, 1) == [Placement()]  # one server, no budget given: vLLM binds its own
    assert [p.cores for p in vllm.placements(None, 3)] == [[0, 1, 2], [3, 4], [6, 7]]  # every core: bound
    assert [vllm.cpu_list(p.cores) for p in vllm.placements(None, 2)] == ["0-3", "4,6-7"]
    assert vllm.placements(7, 2) == [Placement([0, 1, 2, 3], 4), Placement([4, 6, 7], 3)]
    # Fewer threads than cores: a number, not cores (another variant may run beside it), unbound.
    assert vllm.placements(2, 1) == [Placement(None, 2)]
    assert vllm.placements(4, 2) == [Placement(None, 2), Placement(None, 2)]
    env = vllm.environment(VllmConfig(), Placement([4, 6, 7], 3))
    assert (env["VLLM_CPU_OMP_THREADS_BIND"], env["OMP_NUM_THREADS"]) == ("4,6-7", "3")
    assert "VLLM_CPU_OMP_THREADS_BIND" not in vllm.environment(VllmConfig(), Placement())
    with pytest.raises(ConfigError, match="3 instances need a core each and threads=2 gives 2"):
        vllm.placements(2, 3)


def test_a_launchers_cpu_count_places_the_servers_without_binding_cores(monkeypatch) -> None:
    """Ray gives a variant a number of CPUs (OMP_NUM_THREADS), not cores, and runs variants side by
    side: binding each variant's server to the first cores would put them all on the same ones."""
    from selector.engines.vllm import launch as vllm
    from selector.engines.vllm.launch import Placement

    monkeypatch.setattr(vllm.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert vllm.placements(None, 1) == [Placement(None, 2)]
    assert vllm.placements(None, 2) == [Placement(None, 1), Placement(None, 1)]
    env = vllm.environment(VllmConfig(), Placement(None, 2))
    assert (env["VLLM_CPU_OMP_THREADS_BIND"], env["OMP_NUM_THREADS"]) == ("nobind", "2")
    assert vllm.placements(4, 2) == [Placement([0, 1], 2), Placement([2, 3], 2)]  # threads: the user's own budget
    with pytest.raises(ConfigError, match="3 instances need a core each and the launcher gives 2"):
        vllm.placements(None, 3)


def test_metrics_of_instances_are_summed() -> None:
    from selector.engines.served import metrics as prometheus

    def text(counts: tuple[int, int], total: float) -> str:
        return ("# TYPE vllm:request_queue_time_seconds histogram\n"
                f'vllm:request_queue_time_seconds_bucket{{le="0.1"}} {counts[0]}\n'
                f'vllm:request_queue_time_seconds_bucket{{le="+Inf"}} {counts[1]}\n'
                f"vllm:request_queue_time_seconds_count {counts[1]}\nvllm:request_queue_time_seconds_sum {total}\n")

    one = prometheus.parse_histograms(text((2, 3), 0.5))["vllm:request_queue_time_seconds"]
    two = prometheus.parse_histograms(text((1, 4), 2.0))["vllm:request_queue_time_seconds"]
    both = one.plus(two)
    assert (both.buckets, both.count, both.total) == ([(0.1, 3.0), (float("inf"), 7.0)], 7.0, 2.5)
