"""`plan`'s arithmetic: parameter counts from config.json facts (checked against transformers itself,
building each model on the meta device), weight bytes per precision, KV cache, GGUF metadata."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from selector.config import ModelConfig, PrecisionConfig, SourceConfig
from selector.errors import ConfigError
from selector.plan.arch import ArchFacts, read_arch
from selector.plan.estimate import estimate_weights, kv_cache_bytes
from selector.paths import CONF_DIR

ROOT = Path(__file__).resolve().parents[2]
ARCH = CONF_DIR / "arch"

# Facts of the offline ladder's models as their converted config.json files state them.
SMOLLM2 = {"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
           "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64, "vocab_size": 49152,
           "tie_word_embeddings": True, "attention_bias": False}
GEMMA3 = {"model_type": "gemma3_text", "hidden_size": 640, "intermediate_size": 2048, "num_hidden_layers": 18,
          "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 262144,
          "tie_word_embeddings": True, "sliding_window": 512,
          "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 3}
QWEN_CODER = {"model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
              "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": False}


def precision(name: str, backend: str, *, method: str | None = None, bits: int | None = None,
              dtype: str = "bfloat16", **params: object) -> PrecisionConfig:
    return PrecisionConfig(name=name, backend=backend, method=method, bits=bits, dtype=dtype, params=dict(params))


BF16 = precision("bf16", "native", bits=16)
INT8 = precision("int8", "bnb", method="int8", bits=8)
GPTQ4 = precision("gptq-int4", "gptqmodel", method="gptq", bits=4, group_size=128)
AWQ4 = precision("awq-int4", "llmcompressor", method="awq", bits=4, group_size=128)


@pytest.mark.parametrize("name,expected", [
    # The parameter counts converted copies report (manifest.json) and Qwen's model cards state.
    ("smollm2", 134_515_008), ("gemma3", 268_098_176), ("qwen-coder", 1_777_088_000),
    ("qwen2.5-32b", 32_763_876_352),
])
def test_parameter_count_matches_the_published_models(name: str, expected: int) -> None:
    facts = {"smollm2": SMOLLM2, "gemma3": GEMMA3, "qwen-coder": QWEN_CODER}.get(name)
    cfg = facts if facts is not None else json.loads((ARCH / f"{name}.json").read_text())
    assert ArchFacts.from_config(cfg, name).params == expected


@pytest.mark.parametrize("name", ["qwen2.5-7b", "qwen2.5-14b", "gemma3", "smollm2"])
def test_parameter_count_equals_what_transformers_builds(name: str) -> None:
    """Build the model on the meta device (no memory, no weights) and count its parameters."""
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = {"gemma3": GEMMA3, "smollm2": SMOLLM2}.get(name) or json.loads((ARCH / f"{name}.json").read_text())
    raw = {k: list(v) if isinstance(v, tuple) else v for k, v in raw.items()}
    config = AutoConfig.for_model(**raw)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    built = sum(p.numel() for p in model.parameters())  # tied weights are one parameter
    assert ArchFacts.from_config(raw, name).params == built


def test_shipped_qwen_configs_are_the_published_architectures() -> None:
    expect = {"qwen2.5-7b": (3584, 28, 28, 4, 18944), "qwen2.5-14b": (5120, 48, 40, 8, 13824),
              "qwen2.5-32b": (5120, 64, 40, 8, 27648)}
    for name, (hidden, layers, heads, kv, inter) in expect.items():
        a = ArchFacts.from_config(json.loads((ARCH / f"{name}.json").read_text()), name)
        assert (a.hidden_size, a.num_layers, a.num_heads, a.num_kv_heads, a.intermediate_size) == (hidden, layers, heads, kv, inter)
        assert a.head_dim == 128 and a.vocab_size == 152064 and not a.tie_word_embeddings and a.attention_bias


def test_bf16_is_two_bytes_per_parameter_and_fp32_four() -> None:
    a = ArchFacts.from_config(QWEN_CODER, "t")
    assert estimate_weights(a, BF16, "cuda").bytes == 2 * a.params
    assert estimate_weights(a, precision("fp32", "native", dtype="float32"), "cpu").bytes == 4 * a.params


def test_quantized_weights_keep_embeddings_and_head_in_16_bit() -> None:
    """Gemma 3 270M is mostly embedding: 4-bit saves far less than 'params x 4 bits' suggests."""
    a = ArchFacts.from_config(GEMMA3, "gemma3")
    embed = a.param_groups()["embed"]
    gptq = estimate_weights(a, GPTQ4, "cpu").bytes
    assert gptq > 2 * embed  # the 16-bit embedding alone is over 2 x 168M bytes
    assert gptq > 2.5 * a.params * 4 / 8  # far above the naive 4-bit figure
    int8 = estimate_weights(a, INT8, "cuda").bytes
    assert 2 * embed < gptq < int8 < estimate_weights(a, BF16, "cuda").bytes


def test_int4_packing_counts_group_scales_and_zeros() -> None:
    a = ArchFacts.from_config(QWEN_CODER, "t")
    linear = a.param_groups()["linear"]
    rest = 2 * (a.params - linear)
    gptq = estimate_weights(a, GPTQ4, "cuda").bytes
    # 0.5 byte per weight + per group of 128: fp16 scale (2 B) + packed 4-bit zero (0.5 B), + int32 g_idx.
    g_idx = 4 * a.num_layers * sum(i for i, _ in a.linear_shapes())
    assert gptq == pytest.approx(rest + linear * (0.5 + 2.5 / 128) + g_idx, rel=1e-6)


def test_group_size_is_lowered_the_way_the_backends_lower_it() -> None:
    """SmolLM2's width 576 is not a multiple of 128: the backends use 64, so scales double."""
    a = ArchFacts.from_config(SMOLLM2, "smollm2")
    assert "group 64" in estimate_weights(a, GPTQ4, "cpu").layout
    asked_64 = estimate_weights(a, precision("g", "gptqmodel", method="gptq", bits=4, group_size=64), "cpu")
    assert estimate_weights(a, GPTQ4, "cpu").bytes == asked_64.bytes


def test_compressed_tensors_are_unpacked_on_cpu_but_packed_on_gpu() -> None:
    a = ArchFacts.from_config(QWEN_CODER, "t")
    assert estimate_weights(a, AWQ4, "cpu").bytes == 2 * a.params
    assert estimate_weights(a, AWQ4, "cuda").bytes < 0.5 * 2 * a.params


def test_w8a8_is_one_byte_per_weight_served_and_dense_in_process() -> None:
    a = ArchFacts.from_config(QWEN_CODER, "t")
    w8a8 = precision("int8-w8a8", "llmcompressor", method="gptq", bits=8, group_size=0, symmetric=True,
                     activations="int8")
    linear = a.param_groups()["linear"]
    rows = a.num_layers * sum(o for _, o in a.linear_shapes())
    served = estimate_weights(a, w8a8, "cpu", "as-saved")
    # 1 byte per weight and one bf16 scale per output row (symmetric: no zero points, no g_idx)
    assert served.bytes == 2 * (a.params - linear) + linear + 2 * rows
    assert "per channel" in served.layout
    assert estimate_weights(a, w8a8, "cuda").bytes == 2 * a.params


def test_kv_cache_of_qwen_7b() -> None:
    a = ArchFacts.from_config(json.loads((ARCH / "qwen2.5-7b.json").read_text()), "q")
    # 2 (K and V) x 28 layers x 4 kv heads x 128 dims x 2 bytes, per token
    assert kv_cache_bytes(a, batch=8, context=4096, dtype="bfloat16") == 8 * 4096 * 2 * 28 * 512 * 2


def test_sliding_window_layers_cache_at_most_their_window() -> None:
    a = ArchFacts.from_config(GEMMA3, "gemma3")
    per_token = 2 * 256 * 2  # K and V, one kv head of 256 dims, bf16
    assert kv_cache_bytes(a, 1, 4096, "bfloat16") == per_token * (15 * 512 + 3 * 4096)
    assert kv_cache_bytes(a, 1, 100, "bfloat16") == per_token * 18 * 100


def test_arch_from_gguf_metadata(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    import numpy as np

    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_embedding_length(64)
    w.add_block_count(2)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_vocab_size(100)
    w.add_tensor("token_embd.weight", np.zeros((100, 64), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    model = ModelConfig(name="g", source=SourceConfig(kind="gguf", path=str(path)))
    a = read_arch(model, tmp_path / "cache")
    assert a is not None and "GGUF metadata" in a.source
    assert (a.hidden_size, a.num_layers, a.num_heads, a.num_kv_heads, a.head_dim, a.vocab_size) == (64, 2, 4, 2, 16, 100)
    assert a.tie_word_embeddings  # no output.weight tensor: the head reuses the embedding


def test_config_json_in_a_local_folder_and_a_missing_arch_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(SMOLLM2))
    local = ModelConfig(name="l", source=SourceConfig(kind="local", path=str(tmp_path)))
    assert read_arch(local, tmp_path / "cache").params == 134_515_008
    missing = ModelConfig(name="x", source=SourceConfig(kind="hub", repo_id="a/b"), arch_config="conf/arch/nope.json")
    with pytest.raises(ConfigError) as err:
        read_arch(missing, tmp_path / "cache")
    assert err.value.field == "model.arch_config" and "nope.json" in str(err.value)


def test_unusable_config_names_the_missing_field() -> None:
    with pytest.raises(ConfigError) as err:
        ArchFacts.from_config({"hidden_size": 8}, "some/config.json")
    assert "some/config.json" in str(err.value) and err.value.field == "num_attention_heads"


def test_a_model_with_no_architecture_anywhere_is_reported_not_guessed(tmp_path: Path) -> None:
    from selector.plan.estimate import plan_row
    from tests.factories import selector_config

    model = ModelConfig(name="not-fetched-yet", params_b=0.1,
                        source=SourceConfig(kind="pypi-gguf", packages=["some-gguf==1.0"], sha256="ab" * 32))
    assert read_arch(model, tmp_path) is None  # nothing converted or assembled in this cache
    cfg = selector_config(tmp_path, model, BF16)
    row = plan_row(cfg, batch=1, context=128, gpu_gib=24, device="cuda")
    assert row.weight_bytes is None and row.fits is None and "arch_config" in row.notes[0]
