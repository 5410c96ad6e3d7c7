"""Which kernel runs each CPU-runnable precision, read off the loaded tiny model, and what its weights
weigh: the kernel on the record, the unpacked flag, weight bytes against plan's estimate and against
transformers' get_memory_footprint(), and compressed-tensors converted to run packed.

The tiny Llama (hidden 128, 4 layers) has 28 quantizable linear layers and a tied LM head.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from selector.resources.memory import weight_bytes
from selector.plan.arch import ArchFacts
from selector.plan.estimate import estimate_weights
from tests.factories import shipped_precision as precision
from tests.integration.test_precisions_backends import build_model, load

LINEARS = 28
KERNELS = {  # precision: (kernel, module class of the first quantized linear, weight subclass, library kernel)
    "bf16": ("dense", "torch.nn.modules.linear.Linear", "", ""),
    "int8": ("bitsandbytes-int8", "bitsandbytes.nn.modules.Linear8bitLt", "", ""),
    "nf4": ("bitsandbytes-nf4", "bitsandbytes.nn.modules.Linear4bit", "", ""),
    "int8-torchao": ("torchao-int8_weight_only", "torch.nn.modules.linear.Linear", "torchao.quantization.Int8Tensor", ""),
    "gptq-int4": ("gptqmodel-auto", "gptqmodel.nn_modules.qlinear.torch_aten_kernel.TorchAtenLinear", "", "gptq_torch_aten"),
    "awq-int4-gptqmodel": ("gptqmodel-auto", "gptqmodel.nn_modules.qlinear.torch_aten_kernel_awq.TorchAtenAwqLinear",
                           "", "awq_torch_aten"),
    "awq-int4": ("dense", "torch.nn.modules.linear.Linear", "", ""),
}
UNPACKED = {"awq-int4"}  # compressed-tensors on CPU: transformers decompresses it to bf16


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model(tmp_path_factory.mktemp("models") / "tiny128")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def arch(tiny: Path) -> ArchFacts:
    return ArchFacts.from_config(json.loads((tiny / "config.json").read_text()), "tiny")


def run_once(model) -> torch.Tensor:  # type: ignore[no-untyped-def]
    with torch.inference_mode():  # weights settle on the first forward (bitsandbytes repacks, caches fill)
        return model(input_ids=torch.tensor([[1, 5, 9, 13, 17, 21, 40, 50]])).logits.float()


def dense_weights(packed_model, dense_model) -> list[tuple[str, torch.Tensor, torch.Tensor]]:  # type: ignore[no-untyped-def]
    """(name, the packed layer's weight dequantized, the decompressed layer's weight) per quantized linear.

    Losslessness is a property of the weights: the same integers, scales and zero points give the same
    dequantized matrix. The logits are not compared bit for bit: the packed kernel and the dense
    Linear are different bf16 matmul paths, whose rounding differs between CPUs (AVX2, AVX-512, AMX)."""
    dense = dict(dense_model.named_modules())
    pairs = []
    with torch.inference_mode():
        for name, module in packed_model.named_modules():
            if hasattr(module, "dequantize_weight") and name in dense:
                w = module.dequantize_weight()
                ref = dense[name].weight
                pairs.append((name, w.T.to(ref.dtype), ref))  # gptqmodel dequantizes to [in, out]
    return pairs


def assert_lossless(packed_model, dense_model) -> None:  # type: ignore[no-untyped-def]
    pairs = dense_weights(packed_model, dense_model)
    assert len(pairs) == LINEARS
    for name, w, ref in pairs:
        # The same integers give (q - z) * s on both sides; the packed kernel rounds to bf16 after each
        # step and the decompressor once, so they may differ by one bf16 unit in the last place. A
        # changed integer would move a weight by a whole quantization step (scale >> one ulp).
        w32, ref32 = w.float(), ref.float()
        ulp = torch.exp2(torch.floor(torch.log2(torch.maximum(w32.abs(), ref32.abs()).clamp_min(1e-30))) - 7)
        assert bool(((w32 - ref32).abs() <= ulp).all()), (name, (w32 - ref32).abs().max())
    # and the outputs agree as two bf16 paths over the same weights do: top-1 identical, logits close
    a, b = run_once(packed_model), run_once(dense_model)
    assert torch.equal(a.argmax(-1), b.argmax(-1))
    assert torch.allclose(a, b, rtol=0.02, atol=0.02), (a - b).abs().max()


@pytest.mark.parametrize("name", list(KERNELS))
def test_kernel_on_the_record(name: str, tiny: Path, cache: Path) -> None:
    loaded = load(tiny, name, cache)
    k = loaded.kernel
    kernel, linear_class, weight_class, library_kernel = KERNELS[name]
    assert (k.kernel, k.linear_class, k.weight_class, k.library_kernel) == (kernel, linear_class, weight_class,
                                                                            library_kernel)
    assert k.backend == precision(name).backend and k.requested == "auto" and k.dtype == "bfloat16"
    plain = name == "bf16" or name in UNPACKED
    assert (k.quantized_layers, k.plain_layers) == ((0, LINEARS) if plain else (LINEARS, 0))
    assert k.unpacked is (name in UNPACKED)
    assert k.fallbacks == []


@pytest.mark.parametrize(("name", "low", "high"), [
    # measured weight bytes / plan's CPU estimate for the tiny model (+128 bytes of RoPE buffers everywhere)
    ("bf16", 1.0, 1.001), ("int8", 1.0, 1.001), ("int8-torchao", 1.0, 1.001),
    ("nf4", 0.95, 1.001),  # AVX512-BF16 CPUs repack NF4 on the first forward and hold a little less
    ("gptq-int4", 1.0, 1.03), ("awq-int4-gptqmodel", 1.0, 1.03),  # gptqmodel's CPU kernels keep small buffers
    ("awq-int4", 1.0, 1.02),  # decompressed to bf16; its scales and zero points stay loaded
])
def test_weight_bytes_match_plans_estimate(name: str, low: float, high: float, tiny: Path, cache: Path,
                                           arch: ArchFacts) -> None:
    loaded = load(tiny, name, cache)
    run_once(loaded.model)
    measured = weight_bytes(loaded.model)
    estimate = estimate_weights(arch, precision(name), "cpu").bytes
    assert low <= measured / estimate <= high, (measured, estimate)


def test_weight_bytes_against_bf16_and_get_memory_footprint(tiny: Path, cache: Path) -> None:
    """get_memory_footprint() agrees with our count where weights are plain parameters, counts torchao's
    int8 weights at bf16 size and misses bitsandbytes' scales; ours counts both."""
    bf16 = weight_bytes(load(tiny, "bf16", cache).model)
    ratios, footprints = {}, {}
    for name in ("bf16", "int8", "nf4", "int8-torchao", "gptq-int4", "awq-int4"):
        model = load(tiny, name, cache).model
        run_once(model)
        ratios[name] = weight_bytes(model) / bf16
        footprints[name] = model.get_memory_footprint() - weight_bytes(model)
    assert footprints["bf16"] == footprints["gptq-int4"] == footprints["awq-int4"] == 0
    assert footprints["int8"] < 0 and footprints["nf4"] < 0  # SCB / absmax live outside parameters
    assert footprints["int8-torchao"] > 0  # a tensor subclass counted at its logical dtype
    assert ratios["awq-int4"] > 1.0  # unpacked: all of bf16 plus its leftover scales
    assert 0.5 < ratios["int8"] < 0.6 and 0.5 < ratios["int8-torchao"] < 0.6
    assert 0.3 < ratios["gptq-int4"] < 0.36 and 0.3 < ratios["nf4"] < 0.36


def test_compressed_tensors_run_packed_after_a_lossless_conversion(tiny: Path, cache: Path, arch: ArchFacts) -> None:
    dense = load(tiny, "awq-int4", cache)
    packed = load(tiny, "awq-int4", cache, kernel="torch")
    k = packed.kernel
    assert (k.kernel, k.requested, k.unpacked, k.quantized_layers, k.library_kernel) == ("torch", "torch", False,
                                                                                        LINEARS, "gptq_torch")
    assert k.linear_class == "gptqmodel.nn_modules.qlinear.torch.TorchLinear"
    assert any("converted losslessly to GPTQ v2" in n for n in packed.notes)
    assert_lossless(packed.model, dense.model)  # the same integers and scales as the decompressed model
    measured = weight_bytes(packed.model)
    cuda_estimate = estimate_weights(arch, precision("awq-int4"), "cuda").bytes  # what the GPU path holds
    assert measured < 0.4 * weight_bytes(dense.model) and abs(measured / cuda_estimate - 1) < 0.02
    converted = [p for p in (cache / "quantized").glob("tiny128-awq-int4-*-gptq-v2-*") if p.is_dir()]
    assert len(converted) == 1 and json.loads((converted[0] / "config.json").read_text())["quantization_config"][
        "checkpoint_format"] == "gptq_v2"
    again = load(tiny, "awq-int4", cache, kernel="torch")  # the conversion is cached, not redone
    assert [p for p in (cache / "quantized").glob("tiny128-awq-int4-*-gptq-v2-*") if p.is_dir()] == converted
    assert torch.equal(run_once(again.model), run_once(packed.model))  # one kernel, one machine: bit for bit


@pytest.mark.fast  # make test-fast: a compressed-tensors checkpoint converted to GPTQ v2 (precisions/convert.py)
def test_symmetric_gptq_from_llmcompressor_converts_too(tiny: Path, cache: Path) -> None:
    dense = load(tiny, "gptq-int4-llmcompressor", cache)
    packed = load(tiny, "gptq-int4-llmcompressor", cache, kernel="torch")
    assert packed.kernel.quantized_layers == LINEARS and not packed.kernel.unpacked
    assert_lossless(packed.model, dense.model)


def test_an_explicit_gptqmodel_kernel_is_the_one_that_runs(tiny: Path, cache: Path) -> None:
    k = load(tiny, "gptq-int4", cache, kernel="torch").kernel
    assert (k.kernel, k.requested, k.library_kernel) == ("torch", "torch", "gptq_torch")
    assert k.linear_class == "gptqmodel.nn_modules.qlinear.torch.TorchLinear"


def test_the_unpacked_note_comes_from_the_kernel_info(tiny: Path, cache: Path) -> None:
    from selector.engines.inprocess.engine import HfEngineConfig, InProcessRunning

    notes = {}
    for name in ("awq-int4", "gptq-int4"):
        info = InProcessRunning(HfEngineConfig(), load(tiny, name, cache)).info()
        notes[name] = [n for n in info.notes if "unpacked" in n]
    assert notes["gptq-int4"] == []
    assert notes["awq-int4"] == [
        "the in-process engine runs this checkpoint unpacked: its linear layers are plain torch.nn.Linear in "
        "bfloat16 (kernel dense), so its weights take that much memory; a server with a packed kernel for this "
        "format (such as vLLM) keeps them packed"]


def test_a_prequantized_checkpoint_gets_the_same_kernel_rule(tiny: Path, cache: Path, tmp_path: Path) -> None:
    """The pre-quantized branch lives once in the base class: a compressed-tensors checkpoint quantized
    elsewhere is decompressed by default on CPU, or converted and run packed when asked."""
    folder = Path(load(tiny, "awq-int4", cache).quant.artifact_dir)
    dense = load(folder, "awq-int4", tmp_path / "cache", prequantized=True)
    packed = load(folder, "awq-int4", tmp_path / "cache", prequantized=True, kernel="torch")
    assert dense.kernel.unpacked and dense.quant.method == "compressed-tensors" and dense.quant.quantize_s is None
    assert (packed.kernel.kernel, packed.kernel.unpacked, packed.kernel.quantized_layers) == ("torch", False, LINEARS)
    assert any("loaded pre-quantized checkpoint" in n for n in packed.notes)
    assert_lossless(packed.model, dense.model)
    gptq = Path(load(tiny, "gptq-int4", cache).quant.artifact_dir)
    k = load(gptq, "gptq-int4", tmp_path / "cache", prequantized=True, kernel="torch").kernel
    assert (k.backend, k.kernel, k.library_kernel) == ("gptqmodel", "torch", "gptq_torch")
