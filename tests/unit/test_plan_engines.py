"""`plan`'s weight estimates per engine and device come from the backends' own knowledge: the same
kernel rule that loads a variant says whether its weights stay packed."""

from __future__ import annotations

import pytest

from selector.config import ModelConfig, PrecisionConfig, SelectorConfig, SourceConfig
from selector.engines.inprocess.engine import HfEngineConfig
from selector.engines.vllm.engine import VllmEngineConfig
from selector.plan.arch import ArchFacts
from selector.plan.estimate import estimate_weights, plan_row
from tests.unit.test_plan_arch import QWEN_CODER, SMOLLM2, precision

AWQ4 = precision("awq-int4", "llmcompressor", method="awq", bits=4, group_size=128)
GPTQ4 = precision("gptq-int4", "gptqmodel", method="gptq", bits=4, group_size=128)


def arch() -> ArchFacts:
    return ArchFacts.from_config(QWEN_CODER, "qwen-coder")


def g_idx_bytes(a: ArchFacts) -> int:
    return 4 * a.num_layers * sum(i for i, _ in a.linear_shapes())


def test_compressed_tensors_per_engine_and_device() -> None:
    a = arch()
    bf16 = 2 * a.params
    hf_cpu = estimate_weights(a, AWQ4, "cpu", "in-process")
    hf_cuda = estimate_weights(a, AWQ4, "cuda", "in-process")
    served = estimate_weights(a, AWQ4, "cuda", "as-saved")
    assert hf_cpu.bytes == bf16 and "unpacked on CPU" in hf_cpu.layout  # as before: transformers decompresses
    # On CUDA the kernel rule converts it to GPTQ v2 (packed, plus an int32 g_idx per input column) ...
    assert hf_cuda.bytes < 0.5 * bf16 and "GPTQ v2, marlin kernel" not in hf_cuda.layout  # asymmetric AWQ: no Marlin
    assert "GPTQ v2, exllama kernel" in hf_cuda.layout
    # ... and a server holds the compressed-tensors checkpoint as saved (no g_idx).
    assert hf_cuda.bytes - served.bytes == g_idx_bytes(a)
    assert estimate_weights(a, AWQ4, "cpu", "as-saved").bytes == served.bytes


def test_asking_for_the_dense_kernel_costs_bf16_memory_on_a_gpu_too() -> None:
    a = arch()
    dense = precision("awq-int4", "llmcompressor", method="awq", bits=4, group_size=128, kernel="dense")
    est = estimate_weights(a, dense, "cuda", "in-process")
    assert est.bytes == 2 * a.params and "kernel dense" in est.layout
    symmetric_gptq = precision("g", "llmcompressor", method="gptq", bits=4, group_size=128)
    assert "marlin kernel" in estimate_weights(a, symmetric_gptq, "cuda", "in-process").layout


def test_gptqmodel_is_packed_everywhere() -> None:
    a = arch()
    cpu, cuda, served = (estimate_weights(a, GPTQ4, d, e).bytes for d, e in
                         (("cpu", "in-process"), ("cuda", "in-process"), ("cuda", "as-saved")))
    assert cpu == cuda == served < 0.5 * 2 * a.params


def test_native_and_bitsandbytes_do_not_depend_on_the_engine() -> None:
    a = ArchFacts.from_config(SMOLLM2, "smollm2")
    for prec in (precision("bf16", "native", bits=16), precision("int8", "bnb", method="int8", bits=8)):
        assert len({estimate_weights(a, prec, d, e).bytes for d in ("cpu", "cuda") for e in ("in-process", "as-saved")}) == 1


def test_torchao_int8_counts_its_fp32_scale_and_int8_zero_point_per_row() -> None:
    a = arch()
    int8 = precision("int8-torchao", "torchao", method="int8_weight_only", bits=8)
    linear = a.param_groups()["linear"]
    rows = a.num_layers * sum(o for _, o in a.linear_shapes())
    assert estimate_weights(a, int8, "cpu").bytes == 2 * (a.params - linear) + linear + 5 * rows


def test_a_prequantized_checkpoint_is_estimated_packed() -> None:
    a = arch()
    assert estimate_weights(a, AWQ4, "cpu", "in-process", prequantized=True).bytes < 0.5 * 2 * a.params


def test_plan_row_passes_the_sweeps_engine(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    (tmp_path / "config.json").write_text(json.dumps(QWEN_CODER))
    model = ModelConfig(name="q", source=SourceConfig(kind="local", path=str(tmp_path)))
    rows = {}
    for engine in (HfEngineConfig(), VllmEngineConfig()):
        cfg = SelectorConfig(model=model, precision=AWQ4, cache_dir=str(tmp_path / "cache"), engine=engine)
        rows[engine.kind] = plan_row(cfg, batch=1, context=128, gpu_gib=None, device="cuda").weight_bytes
    assert rows["hf"] - rows["vllm"] == g_idx_bytes(arch())


def test_each_kind_plans_its_weights_as_it_holds_them(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The engine says how it holds the weights (Engine.weights_held): vLLM runs the checkpoint as
    saved (packed); the scripted engine loads no model, so its weights are the checkpoint as saved; a
    started command (transformers serve) or an attached server holds them its own way, counted as
    transformers holds them and said so (before, every kind but hf was planned as vLLM holds them)."""
    import json

    from selector.engines.scripted import ScriptedEngineConfig
    from selector.engines.served.attached import AttachedEngineConfig
    from selector.engines.served.command import CommandEngineConfig
    from selector.plan.estimate import weights_held

    (tmp_path / "config.json").write_text(json.dumps(QWEN_CODER))
    model = ModelConfig(name="q", source=SourceConfig(kind="local", path=str(tmp_path)))
    engines = (HfEngineConfig(), VllmEngineConfig(), ScriptedEngineConfig(),
               CommandEngineConfig(server_command="transformers serve {model_path} --port {port}"),
               AttachedEngineConfig())
    held, rows = {}, {}
    for engine in engines:
        cfg = SelectorConfig(model=model, precision=AWQ4, cache_dir=str(tmp_path / "cache"), engine=engine)
        held[engine.kind] = weights_held(cfg)
        rows[engine.kind] = {d: plan_row(cfg, batch=1, context=128, gpu_gib=None, device=d) for d in ("cpu", "cuda")}
    assert held == {"hf": "in-process", "vllm": "as-saved", "scripted": "as-saved", "command": "unknown",
                    "openai": "unknown"}
    size = {kind: {d: r.weight_bytes for d, r in by.items()} for kind, by in rows.items()}
    saved = estimate_weights(arch(), AWQ4, "cpu", "as-saved").bytes
    assert size["hf"] == {"cpu": 2 * arch().params, "cuda": saved + g_idx_bytes(arch())}  # as before
    assert size["vllm"] == size["scripted"] == {"cpu": saved, "cuda": saved}  # as before
    assert size["command"] == size["openai"] == size["hf"]  # was: as vLLM holds them
    assert rows["vllm"]["cpu"].notes == rows["scripted"]["cpu"].notes == []
    unknown = "the server's own layout is not known here: counted as transformers holds them"
    assert unknown not in rows["hf"]["cpu"].notes
    assert all(unknown in rows[k][d].notes for k in ("command", "openai") for d in ("cpu", "cuda"))


def test_plan_compare_asks_each_records_engine(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`selector plan --compare`: a record vLLM served is estimated packed, not as the in-process engine."""
    import json
    from types import SimpleNamespace

    import selector.compose as compose
    import selector.sweep.judging as judging
    from selector.commands.plan import compare_records

    (tmp_path / "config.json").write_text(json.dumps(QWEN_CODER))
    model = ModelConfig(name="q", source=SourceConfig(kind="local", path=str(tmp_path)))
    records = []
    for engine in (HfEngineConfig(), VllmEngineConfig()):
        cfg = SelectorConfig(model=model, precision=AWQ4, cache_dir=str(tmp_path / "cache"), engine=engine)
        records.append(SimpleNamespace(name=f"q/{engine.kind}", status="completed", perf=None,
                                       config=cfg, memory=SimpleNamespace(weight_bytes=10**9)))
    monkeypatch.setattr(judging, "gather_records", lambda _: records)
    monkeypatch.setattr(compose, "config_from_dict", lambda cfg: cfg)  # the records hold typed configs here
    got = {c.variant: c.estimated_bytes for c in compare_records(tmp_path)}  # no perf: on CPU
    assert got["q/hf"] == 2 * arch().params  # transformers decompresses it on CPU, as before
    assert got["q/vllm"] == estimate_weights(arch(), AWQ4, "cpu", "as-saved").bytes < 0.5 * got["q/hf"]


def test_an_unknown_backend_is_estimated_unquantized() -> None:
    a = arch()
    est = estimate_weights(a, PrecisionConfig(name="x", backend="nope", dtype="bfloat16"), "cuda")
    assert est.bytes == 2 * a.params and "unknown backend 'nope'" in est.layout


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_existing_figures_are_unchanged(device: str) -> None:
    """The figures of test_plan_arch.py's cases, recomputed by hand from the pre-seam formulas."""
    a = arch()
    linear = a.param_groups()["linear"]
    rest = 2 * (a.params - linear)
    shapes = [s for _ in range(a.num_layers) for s in a.linear_shapes()]
    assert estimate_weights(a, precision("int8", "bnb", method="int8", bits=8), device).bytes == \
        rest + sum(i * o + 4 * o for i, o in shapes)
    expected_gptq = rest + sum(int(i * o / 2 + o * (i // 128) * 2.5) + 4 * i for i, o in shapes)
    assert estimate_weights(a, GPTQ4, device).bytes == expected_gptq
