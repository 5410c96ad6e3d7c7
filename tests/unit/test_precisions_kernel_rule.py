"""The kernel rule (selector/precisions/kernels.py), checked on CPU by giving it a GPU's compute
capability: which kernel a GPTQ / AWQ / compressed-tensors checkpoint gets, what it falls back to
and why, and when a variant is skipped instead. None of it has run on a GPU here."""

from __future__ import annotations

import pytest

from selector.config import PrecisionConfig
from selector.precisions import get_backend
from selector.precisions.kernels import choose

A100, H200, T4, V100 = (8, 0), (9, 0), (7, 5), (7, 0)


def names(decision) -> list[str]:  # type: ignore[no-untyped-def]
    return [k.name for k in decision.candidates]


def gptq(requested: str = "auto", *, capability: tuple[int, int] | None = H200, dtype: str = "bfloat16",
         bits: int = 4, group_size: int = 128, sym: bool = True, device: str = "cuda:0", fmt: str = "gptq",
         importable=lambda m: True):  # type: ignore[no-untyped-def]
    return choose(fmt, requested, bits=bits, group_size=group_size, sym=sym, dtype=dtype, device=device,
                  capability=capability, importable=importable)


def test_marlin_first_on_ampere_and_newer() -> None:
    for cap in (A100, H200):
        d = gptq(capability=cap)
        assert d.ok and names(d) == ["marlin", "exllama", "triton", "torch"] and d.passed_over == [] and d.packed
        assert d.candidates[0].library_backend == "gptq_marlin"


def test_marlin_needs_8_0_for_bf16_and_falls_back_to_exllama_with_the_reason() -> None:
    d = gptq(capability=V100)
    assert names(d)[0] == "exllama"
    assert d.passed_over == ["marlin: needs compute capability 8.0+ for bfloat16 (this GPU: 7.0)"]
    # Turing runs Marlin in float16 only (gptqmodel's own rule).
    assert names(gptq(capability=T4))[0] == "exllama"
    assert names(gptq(capability=T4, dtype="float16"))[0] == "marlin"


def test_a_named_kernel_the_gpu_cannot_run_is_an_error_not_a_fallback() -> None:
    d = gptq("marlin", capability=V100)
    assert not d.ok and names(d) == [] and "8.0+" in d.error
    assert gptq("marlin", capability=A100).ok


def test_asymmetric_gptq_skips_marlin_and_three_bit_reaches_torch() -> None:
    d = gptq(sym=False, capability=H200)
    assert names(d)[0] == "exllama" and d.passed_over == ["marlin: needs symmetric weights (no zero points)"]
    d = gptq(bits=3)
    assert names(d) == ["torch"] and len(d.passed_over) == 3


def test_missing_triton_is_passed_over() -> None:
    d = gptq(bits=2, importable=lambda m: m != "triton")
    assert names(d) == ["torch"] and "triton: needs triton, which is not installed" in d.passed_over


def test_awq_order_and_its_float16_only_triton_kernel() -> None:
    d = gptq(fmt="awq", sym=False)
    assert names(d) == ["marlin", "exllama", "gemm", "torch"]
    assert "triton: runs in float16, not bfloat16" in d.passed_over
    assert gptq(fmt="awq", capability=V100).candidates[0].library_backend == "awq_exllama_v2"


def test_compressed_tensors_run_packed_on_cuda_and_dense_on_cpu() -> None:
    cuda = gptq(fmt="compressed-tensors", sym=False, capability=A100)
    assert names(cuda) == ["exllama", "triton", "torch", "dense"] and cuda.packed
    cpu = gptq(fmt="compressed-tensors", device="cpu", capability=None)
    assert names(cpu) == ["dense"] and not cpu.packed
    assert names(gptq("dense", fmt="compressed-tensors")) == ["dense"]
    assert names(gptq("torch", fmt="compressed-tensors", device="cpu")) == ["torch"]


def test_cpu_leaves_gptq_and_awq_to_gptqmodel_and_refuses_cuda_kernels() -> None:
    auto = gptq(device="cpu", capability=None)
    assert auto.ok and auto.library_auto and auto.packed and names(auto) == []
    assert gptq("exllama", device="cpu").error == "exllama: needs a CUDA GPU"
    assert gptq("dense").error.startswith("kernel 'dense' does not run gptq checkpoints")


def test_unknown_capability_is_not_held_against_a_kernel() -> None:
    assert names(gptq(capability=None))[0] == "marlin"  # `plan` for an unnamed GPU


@pytest.mark.parametrize(("backend", "method", "params", "capability", "ok", "needle"), [
    ("gptqmodel", "gptq", {"kernel": "marlin"}, V100, False, "needs compute capability 8.0+"),
    ("gptqmodel", "gptq", {"kernel": "marlin"}, A100, True, ""),
    ("gptqmodel", "gptq", {}, V100, True, ""),  # auto falls back
    ("gptqmodel", "awq", {"kernel": "gemm"}, V100, True, ""),
    # transformers runs AWQ in float16 on CUDA, so the rule is asked about float16 even for a bf16 precision
    ("gptqmodel", "awq", {"kernel": "marlin"}, V100, False, "needs compute capability 8.0+ for float16"),
    ("llmcompressor", "awq", {"kernel": "marlin"}, H200, False, "symmetric"),
    ("llmcompressor", "gptq", {"kernel": "marlin"}, H200, True, ""),
])
def test_availability_asks_the_kernel_rule_with_the_gpus_capability(backend: str, method: str, params: dict,
                                                                    capability: tuple[int, int], ok: bool,
                                                                    needle: str) -> None:
    cfg = PrecisionConfig(name="x", backend=backend, method=method, bits=4, params=params)
    found, why = get_backend(backend).availability(cfg, "cuda:0", capability=capability)
    assert found is ok and needle in why, why


def test_availability_on_cpu_refuses_a_cuda_kernel() -> None:
    cfg = PrecisionConfig(name="x", backend="gptqmodel", method="gptq", bits=4, params={"kernel": "marlin"})
    ok, why = get_backend("gptqmodel").availability(cfg, "cpu")
    assert not ok and why == "marlin: needs a CUDA GPU"
