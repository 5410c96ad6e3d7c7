"""scripts/gpu_check.sh: stops at once, clearly, where there is no CUDA; its plumbing (selector's
precision backends, latency and memory measurement, the JSON) checked on CPU with --device cpu."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"


def cuda_here() -> bool:
    import torch

    return torch.cuda.is_available()


def test_exits_early_with_a_clear_message_without_cuda(tmp_path: Path) -> None:
    if cuda_here():
        pytest.skip("this machine has CUDA: the check would run for real")
    out = tmp_path / "gpu_check.json"
    done = subprocess.run(["bash", str(SCRIPT), "--out", str(out)], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable}, cwd=tmp_path)
    assert done.returncode == 3
    assert "no CUDA device here" in done.stderr and "Nothing was run" in done.stderr
    assert "Traceback" not in done.stderr and not out.exists()


def run_check(tmp_path: Path, precisions: str, *args: str) -> tuple[dict, dict[str, dict]]:  # type: ignore[type-arg]
    """gpu_check.py on a one-layer model, one timed repeat: the report, and its results by precision."""
    out = tmp_path / "gpu_check.json"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--out", str(out), "--precisions",
                           precisions, "--layers", "1", "--warmup", "0", "--repeats", "1", *args],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(out.read_text())
    return report, {r["precision"]: r for r in report["results"]}


@pytest.mark.quant("bitsandbytes")
def test_plumbing_on_cpu_writes_one_json(tmp_path: Path) -> None:
    report, results = run_check(tmp_path, "bf16,int8", "--device", "cpu")
    assert report["device"] == "cpu" and report["gpu"] is None
    assert results["bf16"]["status"] == results["int8"]["status"] == "ok"
    assert "Linear8bitLt" in results["int8"]["linear_classes"]  # bitsandbytes really quantized it
    assert results["int8"]["weight_bytes"] < results["bf16"]["weight_bytes"]
    assert results["bf16"]["latency"]["e2e_ms"]["p50"] > 0


TINY_ARCH = {  # a Qwen2 config.json, as conf/arch/ holds them, small enough for CPU
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 128, "intermediate_size": 256,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
    "max_position_embeddings": 1024, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": False,
    "hidden_act": "silu", "torch_dtype": "bfloat16", "use_sliding_window": False,
}


def run_arch(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    arch = tmp_path / "tiny-qwen.json"
    arch.write_text(json.dumps(TINY_ARCH))
    out = tmp_path / "gpu_check.json"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--device", "cpu", "--arch", str(arch),
                           "--out", str(out), *args], capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert out.exists(), done.stderr[-4000:]
    return done, json.loads(out.read_text())


@pytest.mark.slow
def test_arch_on_cpu_builds_quantizes_measures_and_checks(tmp_path: Path) -> None:
    from selector.plan.arch import ArchFacts

    done, report = run_arch(tmp_path, "--precisions", "bf16,int8,awq-int4", "--compile", "on", "--warmup", "0",
                            "--repeats", "2", "--batch-sizes", "2")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-4000:]
    assert report["model"]["arch"] == "tiny-qwen"
    assert report["model"]["parameters"] == ArchFacts.from_config(TINY_ARCH, "test").params  # what plan counts
    results = {r["precision"]: r for r in report["results"]}
    bf16, int8 = results["bf16"], results["int8"]
    # bf16 ran on the fast path, its compile time apart; bitsandbytes cannot be compiled and says so.
    assert bf16["fast_path"]["active"] and bf16["fast_path"]["compile_s"] > 0
    assert bf16["latency"]["e2e_ms"]["p99"] < bf16["fast_path"]["compile_s"] * 1e3
    assert not int8["fast_path"]["active"] and "Bnb8BitHfQuantizer" in int8["fast_path"]["note"]
    assert bf16["first_linear"] == {"module": "model.layers.0.self_attn.q_proj", "class": "Linear",
                                    "class_module": "torch.nn.modules.linear", "storage": {"weight": "bfloat16"},
                                    "packed": False}
    assert int8["first_linear"]["class"] == "Linear8bitLt" and int8["first_linear"]["packed"]
    # AWQ, quantized here by llmcompressor from the saved random model (16 x 256 calibration tokens).
    # On CPU transformers holds its weights unpacked in bf16, and its compressed-tensors hooks do not
    # compile whole: both show in the record.
    awq = results["awq-int4"]
    assert awq["quant"]["library"] == "llmcompressor" and awq["quant"]["calibration"]["num_samples"] == 16
    assert awq["first_linear"]["storage"]["weight"] == "bfloat16" and not awq["first_linear"]["packed"]
    assert not awq["fast_path"]["active"] and "torch.compile failed on cpu" in awq["fast_path"]["note"]
    assert [p["batch_size"] for p in bf16["throughput"]] == [2] and bf16["shape"] == {"batch": 2, "context": 128}

    checks = {(c["check"], c.get("precision")): c for c in report["checks"]}
    for name in ("bf16", "int8", "awq-int4"):
        assert checks[("weights_vs_plan", name)]["status"] == "pass"
        assert abs(checks[("weights_vs_plan", name)]["error_pct"]) <= 3
        assert checks[("peak_vs_plan", name)]["status"] == "not applicable on cpu"
    for name in ("bf16_decode_vs_bandwidth", "int4_weights_vs_bf16", "int4_batch1_not_slower_than_bf16"):
        assert [c["status"] for c in report["checks"] if c["check"] == name] == ["not applicable on cpu"]
    assert report["bandwidth_bytes_per_s"] is None and report["elapsed_s"] < report["budget_s"]
    assert [s["step"] for s in report["steps"]][:2] == ["build and save", "bf16: load"]


def test_arch_skips_what_the_budget_cannot_hold_and_says_so(tmp_path: Path) -> None:
    done, report = run_arch(tmp_path, "--precisions", "bf16,awq-int4", "--compile", "on", "--budget-s", "30")
    assert done.returncode == 1
    assert [r["status"] for r in report["results"]] == ["skipped", "skipped"]  # 37 and 45 s by the estimate
    if report.get("stopped"):  # a machine busy enough that starting up and building ate the whole budget
        assert report["stopped"] == "the 30 s budget ran out"
        assert all(r["reason"] == "not started: the 30 s budget ran out" for r in report["results"])
        return
    assert all("by the estimate" in r["reason"] and "of the budget left" in r["reason"] for r in report["results"])
    assert {c["status"] for c in report["checks"] if c["check"] == "weights_vs_plan"} == {"not run (skipped)"}


@pytest.mark.gpu
@pytest.mark.quant("bitsandbytes")
def test_on_a_gpu_the_check_runs_for_real(tmp_path: Path) -> None:
    """The CUDA counterpart of the tests above: fp16 and bitsandbytes int8 on the device (its default)."""
    report, results = run_check(tmp_path, "fp16,int8")
    assert report["device"] == "cuda:0" and report["gpu"] and report["cuda"]
    assert results["fp16"]["status"] == results["int8"]["status"] == "ok"
    assert "Linear8bitLt" in results["int8"]["linear_classes"]
    assert 0 < results["int8"]["weight_bytes"] < results["fp16"]["weight_bytes"]
    assert results["fp16"]["cuda_max_allocated_bytes"] > 0  # measured on the device, not in host memory
