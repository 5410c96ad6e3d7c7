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
