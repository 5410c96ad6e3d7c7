"""Every precision backend end to end on a tiny real Llama built here: quantize -> save -> reload ->
generate -> score, with fidelity bounds against the fp32 model that a broken backend would violate.
Also the artifact cache, the group-size rule, pre-quantized loading and each CPU pitfall.

The tiny model (hidden 128, 4 layers) is initialised with std 0.05 rather than transformers' 0.02 so
its next-token distributions are peaked enough for 4-bit error to show: with the default init its
logits are almost flat and any perturbation flips the argmax, so 8-bit and 4-bit look alike.
Calibration is tiny (4 x 64 tokens) to keep the run short; the SmolLM2 tests (slow) use real budgets.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from selector.config import CalibrationConfig, ModelConfig
from selector.generation import GenerationRequest, LoglikelihoodRequest
from selector.errors import ConfigError, UnavailableError
from selector.engines.spec import TopLogprobs
from selector.engines.inprocess.logprobs import probe_logprobs
from selector.measure.fidelity import PROBE_POSITIONS, Reference, compare_all, corpus_probes, reference_from
from selector.models import ResolvedModel
from selector.precisions import get_backend
from selector.precisions.base import LoadContext, LoadedModel
from tests.factories import shipped_precision
from tests.tiers import precision_case

EIGHT_BIT = ["int8", "int8-torchao", "gptq-int8", "int8-w8a8"]
FOUR_BIT = ["nf4", "gptq-int4", "awq-int4", "awq-int4-gptqmodel", "gptq-int4-llmcompressor"]
QUANT_METHOD_IN_CONFIG = {"gptq-int4": "gptq", "gptq-int8": "gptq", "awq-int4-gptqmodel": "awq",
                          "awq-int4": "compressed-tensors", "gptq-int4-llmcompressor": "compressed-tensors",
                          "int8-w8a8": "compressed-tensors"}
SMALL_CALIBRATION = CalibrationConfig(num_samples=4, seq_len=64)


# ---- building blocks ----------------------------------------------------------------------------
def build_model(out: Path, hidden: int = 128, layers: int = 4, std: float = 0.05, arch: str = "llama") -> Path:
    from transformers import (
        Gemma3ForCausalLM,
        Gemma3TextConfig,
        GenerationConfig,
        LlamaConfig,
        LlamaForCausalLM,
    )

    from tests.tiny import build_tokenizer

    tok = build_tokenizer(out)
    common = dict(vocab_size=len(tok), hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                  initializer_range=std, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                  pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    if arch == "gemma3":
        model = Gemma3ForCausalLM(Gemma3TextConfig(head_dim=hidden // 4, sliding_window=64, **common))
    else:
        model = LlamaForCausalLM(LlamaConfig(tie_word_embeddings=True, **common))
    model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                                               bos_token_id=tok.bos_token_id)
    model.save_pretrained(out, safe_serialization=True)
    return out


def resolved(path: Path, prequantized: bool = False) -> ResolvedModel:
    return ResolvedModel(name=path.name, path=str(path), is_local=True, prequantized=prequantized, kind="local")


def load(model_dir: Path, name: str, cache: Path, calibration: CalibrationConfig = SMALL_CALIBRATION,
         prequantized: bool = False, **params: Any) -> LoadedModel:
    prec = shipped_precision(name, **params)
    backend = get_backend(prec.backend)
    ok, why = backend.availability(prec, "cpu")
    assert ok, why
    ctx = LoadContext(model_cfg=ModelConfig(name=model_dir.name), device="cpu", cache_dir=cache,
                      calibration=calibration)
    return backend.load(resolved(model_dir, prequantized), prec, ctx)


@dataclass
class Outcome:
    loaded: LoadedModel
    kl: float
    agreement: float
    generated_tokens: int
    logprob: float


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model(tmp_path_factory.mktemp("models") / "tiny128")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def probes(tiny: Path) -> list[list[int]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny)
    return [tok(text)["input_ids"][-256:] for text in corpus_probes(8)]


@pytest.fixture(scope="module")
def fp32_reference(tiny: Path, cache: Path, probes: list[list[int]]) -> Reference:
    return reference_from(probe_logprobs(load(tiny, "fp32", cache).model, probes, PROBE_POSITIONS))


@pytest.fixture(scope="module")
def outcome(tiny: Path, cache: Path, probes: list[list[int]], fp32_reference: Reference):  # type: ignore[no-untyped-def]
    @functools.cache
    def run(name: str) -> Outcome:
        from selector.engines.inprocess.evaluator import TransformersEvaluator

        loaded = load(tiny, name, cache)
        kl, agree = compare_all(fp32_reference, (TopLogprobs(lp) for lp in probe_logprobs(loaded.model, probes, PROBE_POSITIONS)))
        engine = TransformersEvaluator(loaded.model, loaded.tokenizer, batch_size=2)
        gen = engine.generate([GenerationRequest("Bob bought 3 apples and", 8), GenerationRequest("def add(a, b):", 8)])
        score = engine.loglikelihood([LoglikelihoodRequest("The food was great and the staff were", " lovely")])
        return Outcome(loaded, float(kl.mean()), float(agree.float().mean()), sum(g.output_tokens for g in gen),
                       score[0].logprob)

    return run


# ---- every backend end to end -------------------------------------------------------------------
@pytest.mark.parametrize("name", [precision_case(n) for n in EIGHT_BIT + FOUR_BIT])
def test_backend_end_to_end(name: str, outcome) -> None:  # type: ignore[no-untyped-def]
    out = outcome(name)
    quant = out.loaded.quant
    assert quant is not None and quant.method and quant.library and quant.library_version
    assert out.generated_tokens > 0
    assert math.isfinite(out.logprob) and out.logprob < 0
    assert math.isfinite(out.kl) and out.kl > 0  # quantization changed something
    # Measured on this model (bf16 compute, vs fp32): bf16 alone 0.965 / 1e-5; 8-bit 0.90-0.95 /
    # <1e-4; 4-bit 0.43-0.61 / ~1e-2. A backend that silently skipped quantization would exceed
    # the 4-bit bounds; one that broke the weights would fall below the 8-bit ones.
    if name in EIGHT_BIT:
        assert out.agreement >= 0.85 and out.kl < 1e-3, (out.agreement, out.kl)
    else:
        # far above chance (1/444) and clearly below the 8-bit variants
        assert 0.25 <= out.agreement < 0.85 and 2e-3 < out.kl < 0.5, (out.agreement, out.kl)
    if name in QUANT_METHOD_IN_CONFIG:  # quantized locally: a cached safetensors checkpoint
        folder = Path(quant.artifact_dir)  # type: ignore[arg-type]
        assert quant.quantize_s and quant.quantize_s > 0 and not quant.cached
        assert quant.artifact_bytes and quant.artifact_bytes > 0
        assert list(folder.glob("*.safetensors")) and not list(folder.glob("*.bin"))
        config = json.loads((folder / "config.json").read_text())
        assert config["quantization_config"]["quant_method"] == QUANT_METHOD_IN_CONFIG[name]
        assert (folder / "tokenizer.json").is_file()  # a server can load the folder alone
        assert quant.calibration["num_samples"] == 4 and quant.calibration["tokens"] > 0
        if name == "int8-w8a8":  # int8 per-channel weights, int8 activations quantized per token at run time
            (group,) = config["quantization_config"]["config_groups"].values()
            assert group["weights"]["num_bits"] == 8 and group["weights"]["strategy"] == "channel"
            assert group["input_activations"] == {**group["input_activations"], "num_bits": 8, "type": "int",
                                                  "strategy": "token", "dynamic": True}
    else:  # quantized at load time: nothing written
        assert out.loaded.artifact_dir is None and quant.artifact_dir is None


@pytest.mark.quant()
def test_eight_bit_is_closer_to_fp32_than_four_bit(outcome) -> None:  # type: ignore[no-untyped-def]
    eight = [outcome(n) for n in EIGHT_BIT]
    four = [outcome(n) for n in FOUR_BIT]
    assert min(o.agreement for o in eight) > max(o.agreement for o in four)
    assert max(o.kl for o in eight) * 10 < min(o.kl for o in four)


@pytest.mark.quant("torchao")
@pytest.mark.fast
def test_torchao_int4_is_unavailable_on_cpu_with_a_reason() -> None:
    prec = shipped_precision("int4-torchao")
    ok, why = get_backend(prec.backend).availability(prec, "cpu")
    assert not ok and "CUDA" in why
    assert get_backend(prec.backend).availability(prec, "cuda:0") == (True, "")


@pytest.mark.quant("gptqmodel")
@pytest.mark.fast
def test_gptqmodel_awq_on_cpu_needs_bf16() -> None:
    prec = shipped_precision("awq-int4-gptqmodel")
    prec.dtype = "float32"
    ok, why = get_backend(prec.backend).availability(prec, "cpu")
    assert not ok and "bfloat16" in why


# ---- the artifact cache -------------------------------------------------------------------------
@pytest.mark.quant("gptqmodel", "optimum")
def test_second_load_is_a_cache_hit(tiny: Path, cache: Path, outcome) -> None:  # type: ignore[no-untyped-def]
    first = outcome("gptq-int4").loaded.quant
    folder = Path(first.artifact_dir)
    mtime = folder.stat().st_mtime_ns
    before = sorted(p.name for p in (cache / "quantized").iterdir())
    again = load(tiny, "gptq-int4", cache)
    assert again.quant.cached and again.quant.artifact_dir == first.artifact_dir
    assert again.quant.quantize_s == first.quantize_s  # what it cost, as recorded when it was built
    assert again.quant.params == first.params and again.quant.calibration == first.calibration
    assert folder.stat().st_mtime_ns == mtime
    assert sorted(p.name for p in (cache / "quantized").iterdir()) == before
    assert any("reused cached artifact" in n for n in again.notes)


@pytest.mark.quant("gptqmodel", "optimum")
def test_key_changes_with_calibration_and_params(tiny: Path, cache: Path, outcome) -> None:  # type: ignore[no-untyped-def]
    first = outcome("gptq-int4").loaded.quant
    other_seed = load(tiny, "gptq-int4", cache, calibration=CalibrationConfig(num_samples=4, seq_len=64, seed=1))
    assert not other_seed.quant.cached and other_seed.quant.artifact_dir != first.artifact_dir
    assert other_seed.quant.calibration["sha256"] != first.calibration["sha256"]
    smaller_groups = load(tiny, "gptq-int4", cache, group_size=32)
    assert not smaller_groups.quant.cached and smaller_groups.quant.params["group_size"] == 32
    assert len({first.artifact_dir, other_seed.quant.artifact_dir, smaller_groups.quant.artifact_dir}) == 3


# ---- group size vs hidden size ------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny96(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model(tmp_path_factory.mktemp("models96") / "tiny96", hidden=96, layers=2)


@pytest.mark.fast  # make test-fast: GPTQ calibrates, quantizes, saves and reloads a tiny model in a second
@pytest.mark.parametrize("name", [precision_case("gptq-int4"), precision_case("gptq-int4-llmcompressor")])
def test_group_size_falls_to_one_that_divides_hidden_96(name: str, tiny96: Path, cache: Path) -> None:
    loaded = load(tiny96, name, cache)
    assert loaded.quant.params["group_size"] == 32 and loaded.quant.params["group_size_requested"] == 128
    assert any("used 32" in n for n in loaded.notes)
    qcfg = json.loads((Path(loaded.quant.artifact_dir) / "config.json").read_text())["quantization_config"]
    saved = qcfg.get("group_size") or qcfg["config_groups"]["group_0"]["weights"]["group_size"]
    assert saved == 32
    with torch.inference_mode():
        logits = loaded.model(input_ids=torch.tensor([[1, 2, 3, 4]])).logits
    assert torch.isfinite(logits).all()


@pytest.mark.quant("gptqmodel")
def test_gptqmodel_awq_refuses_layers_its_clip_search_cannot_split(tiny96: Path, cache: Path) -> None:
    with pytest.raises(UnavailableError, match="divisible by 64"):
        load(tiny96, "awq-int4-gptqmodel", cache)


# ---- pre-quantized checkpoints ------------------------------------------------------------------
@pytest.mark.quant("gptqmodel", "optimum")
def test_prequantized_checkpoint_loads_without_quantizing(tiny: Path, cache: Path, outcome) -> None:  # type: ignore[no-untyped-def]
    local = outcome("gptq-int4").loaded
    folder = Path(local.quant.artifact_dir)
    mtime = folder.stat().st_mtime_ns
    pre = load(folder, "gptq-int4", cache / "elsewhere", prequantized=True)
    assert pre.quant.method == "gptq" and pre.quant.library == "gptqmodel"
    assert pre.quant.quantize_s is None and not pre.quant.cached
    assert pre.quant.params["bits"] == 4 and pre.quant.artifact_dir == str(folder)
    assert not (cache / "elsewhere" / "quantized").exists()  # nothing was quantized
    assert folder.stat().st_mtime_ns == mtime
    ids = torch.tensor([[1, 5, 9, 13, 17]])
    with torch.inference_mode():
        assert torch.equal(pre.model(input_ids=ids).logits, local.model(input_ids=ids).logits)


@pytest.mark.quant("gptqmodel")
@pytest.mark.fast
def test_prequantized_folder_without_quantization_config_is_a_config_error(tiny: Path, cache: Path) -> None:
    with pytest.raises(ConfigError, match="not a quantized checkpoint"):
        load(tiny, "gptq-int4", cache, prequantized=True)


# ---- CPU pitfalls -------------------------------------------------------------------------------
@pytest.mark.quant("bitsandbytes")
def test_nf4_is_requantized_at_load_and_matches_a_fresh_quantization(tiny: Path, cache: Path) -> None:
    # bitsandbytes on AVX512-BF16 CPUs repacks NF4 weights on the first forward; a state_dict saved
    # after that is corrupt. We never save NF4: each load quantizes afresh, so a model that has
    # already run forward passes and a fresh load must agree exactly.
    first = load(tiny, "nf4", cache)
    assert first.artifact_dir is None and first.quant.artifact_dir is None
    ids = torch.tensor([[1, 7, 11, 19, 23, 29]])
    with torch.inference_mode():
        first.model.generate(ids, max_new_tokens=4, do_sample=False)  # forward passes (the repack trigger)
        after_forward = first.model(input_ids=ids).logits
    fresh = load(tiny, "nf4", cache)
    with torch.inference_mode():
        assert torch.equal(fresh.model(input_ids=ids).logits, after_forward)
    assert not (cache / "quantized" / f"{tiny.name}-nf4").exists()


@pytest.mark.quant("gptqmodel", "optimum")
def test_gemma3_gptq_saves_despite_stray_rope_keys(tmp_path: Path, cache: Path) -> None:
    gemma = build_model(tmp_path / "tinygemma", hidden=128, layers=2, arch="gemma3")
    loaded = load(gemma, "gptq-int4", cache)
    assert any("stray rope_parameters" in n for n in loaded.notes)
    saved = json.loads((Path(loaded.quant.artifact_dir) / "config.json").read_text())
    assert set(saved["rope_parameters"]) == {"sliding_attention", "full_attention"}
    with torch.inference_mode():
        assert torch.isfinite(loaded.model(input_ids=torch.tensor([[1, 2, 3]])).logits).all()


@pytest.mark.quant("llmcompressor")
@pytest.mark.fast
def test_llmcompressor_pinning_fails_on_cpu_and_is_skipped_there() -> None:
    from llmcompressor.pipelines.cache import IntermediatesCache, IntermediateValue

    from selector.precisions.cpu_fixes import (
        accelerator_available,
        no_pinned_memory_without_accelerator,
    )

    if accelerator_available():
        pytest.skip("pinning works where an accelerator exists")
    cache = IntermediatesCache([{"x": IntermediateValue(value=torch.ones(4), device=None)}])
    with pytest.raises(RuntimeError, match="accelerator"):
        cache.pin_memory(0)
    original = IntermediatesCache.pin_memory
    with no_pinned_memory_without_accelerator():
        cache.pin_memory(0)  # no error
        assert not cache.batch_intermediates[0]["x"].value.is_pinned()
    assert IntermediatesCache.pin_memory is original
