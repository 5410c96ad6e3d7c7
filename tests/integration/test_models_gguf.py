"""GGUF -> safetensors conversion on a tiny GGUF written here with the `gguf` package: a 2-layer
Llama with a byte-level BPE tokenizer trained here, one tensor stored as Q8_0, and the same special
token metadata as SmolLM2's GGUF (which transformers reads with the wrong eos_token)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from selector import models
from selector.config import ModelConfig, SourceConfig
from selector.errors import ConfigError

pytestmark = pytest.mark.fast  # make test-fast: the GGUF conversion on a tiny file, seconds

REPO = Path(__file__).resolve().parents[2]
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CORPUS = ["the cat sat on the mat", "hello world, the answer is positive", "a small model for tests"] * 5
HIDDEN, LAYERS, FFN, HEADS, KV_HEADS = 32, 2, 64, 4, 2
Tiny = dict[str, Any]  # the module fixture: GGUF path, expected tensors, config, cache, first resolve


def train_tokenizer():  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer, decoders, models as tok_models, pre_tokenizers, trainers

    tok = Tokenizer(tok_models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def write_tiny_gguf(path: Path) -> dict[str, np.ndarray]:
    """Write the GGUF; return the float tensors the converted model must hold (by HF name)."""
    import gguf

    tok = train_tokenizer()
    tokens = [t for t, _ in sorted(tok.get_vocab().items(), key=lambda kv: kv[1])]
    merges = [" ".join(m) if isinstance(m, list) else m for m in json.loads(tok.to_str())["model"]["merges"]]
    vocab = len(tokens)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-test")
    writer.add_context_length(128)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_vocab_size(vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if t.startswith("<|") else gguf.TokenType.NORMAL for t in tokens])
    writer.add_token_merges(merges)
    # SmolLM2's ids: bos 1 = <|im_start|>, eos 2 = <|im_end|>, pad 2, unk 0 = <|endoftext|>
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML)

    rng = np.random.default_rng(0)
    expected: dict[str, np.ndarray] = {}

    def add(name: str, *shape: int, hf: str | None = None) -> None:
        data = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        writer.add_tensor(name, data)
        if hf:
            expected[hf] = data

    add("token_embd.weight", vocab, HIDDEN, hf="model.embed_tokens.weight")
    for i in range(LAYERS):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(HIDDEN, np.float32))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(HIDDEN, np.float32))
        add(f"blk.{i}.attn_q.weight", HIDDEN, HIDDEN)
        add(f"blk.{i}.attn_k.weight", HIDDEN // HEADS * KV_HEADS, HIDDEN)
        add(f"blk.{i}.attn_v.weight", HIDDEN // HEADS * KV_HEADS, HIDDEN, hf=f"model.layers.{i}.self_attn.v_proj.weight")
        add(f"blk.{i}.attn_output.weight", HIDDEN, HIDDEN)
        add(f"blk.{i}.ffn_gate.weight", FFN, HIDDEN)
        add(f"blk.{i}.ffn_up.weight", FFN, HIDDEN)
    for i in range(LAYERS):  # stored quantized: the conversion must dequantize it
        down = (rng.standard_normal((HIDDEN, FFN)) * 0.05).astype(np.float32)
        packed = gguf.quants.quantize(down, gguf.GGMLQuantizationType.Q8_0)
        writer.add_tensor(f"blk.{i}.ffn_down.weight", packed, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        expected[f"model.layers.{i}.mlp.down_proj.weight"] = gguf.quants.dequantize(packed, gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("output_norm.weight", np.ones(HIDDEN, np.float32))
    add("output.weight", vocab, HIDDEN, hf="lm_head.weight")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return expected


def expected_parameters(vocab: int) -> int:
    kv = HIDDEN // HEADS * KV_HEADS
    per_layer = 2 * HIDDEN + 2 * HIDDEN * HIDDEN + 2 * kv * HIDDEN + 3 * FFN * HIDDEN
    return 2 * vocab * HIDDEN + LAYERS * per_layer + HIDDEN


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Tiny:
    root = tmp_path_factory.mktemp("tiny-gguf")
    gguf_path = root / "tiny.gguf"
    expected = write_tiny_gguf(gguf_path)
    model = ModelConfig(name="tiny-gguf", source=SourceConfig(kind="gguf", path=str(gguf_path)))
    cache = root / "cache"
    resolved = models.resolve(model, cache, progress=False)
    return {"gguf": gguf_path, "expected": expected, "model": model, "cache": cache, "resolved": resolved}


def test_manifest_records_source_checksum_and_tokenizer_fixes(tiny: Tiny) -> None:
    resolved, manifest = tiny["resolved"], tiny["resolved"].manifest
    folder = Path(resolved.path)
    sha = hashlib.sha256(tiny["gguf"].read_bytes()).hexdigest()
    assert folder == tiny["cache"] / "models" / f"tiny-gguf-{sha[:12]}-bfloat16"  # the default precisions' dtype
    assert resolved.is_local and resolved.kind == "gguf" and not resolved.prequantized
    assert manifest["gguf"]["sha256"] == sha and manifest["gguf"]["quantization"] == "Q8_0"
    assert manifest["source"] == {"kind": "gguf", "path": str(tiny["gguf"].resolve()), "sha256": sha}
    assert manifest["parameters"] == expected_parameters(manifest["tokenizer"]["vocab_size"])
    assert manifest["dtype"] == "bfloat16" and manifest["format"] == 2 and manifest["architecture"] == "LlamaForCausalLM"
    assert manifest["transformers_version"] and manifest["created_at"]
    assert "dequantized from a Q8_0 GGUF to bfloat16" in manifest["note"]
    tok = manifest["tokenizer"]
    assert (tok["eos_token"], tok["eos_token_id"], tok["generation_eos_token_id"]) == ("<|im_end|>", 2, [2])
    assert "eos_token '<|im_start|>' -> '<|im_end|>' (GGUF tokenizer.ggml.eos_token_id = 2)" in tok["fixes"]
    assert tok["chat_template"] is True and tok["adds_bos"] is False
    assert tok["check"]["ok"] is False  # random weights: no better than uniform guessing, and it says so
    assert resolved.artifact_bytes() == manifest["weight_bytes"] == (folder / "model.safetensors").stat().st_size
    assert {p.name for p in folder.iterdir()} >= {"config.json", "generation_config.json", "model.safetensors",
                                                   "tokenizer.json", "tokenizer_config.json", "manifest.json"}
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())
    assert not list(folder.parent.glob(".*tmp*"))  # the temporary folder was renamed, not left behind


def test_weights_are_the_gguf_tensors_in_the_dtype_the_precision_loads(tiny: Tiny) -> None:
    """bf16 (the default): the GGUF's float32 values rounded to bf16, exactly as loading a float32
    folder at bf16 rounded them (the first format); float32 (precision fp32): the values themselves,
    in a folder of its own. Each is converted once."""
    import torch
    from safetensors.torch import load_file

    bf16 = load_file(str(Path(tiny["resolved"].path) / "model.safetensors"))
    fp32_resolved = models.resolve(tiny["model"], tiny["cache"], dtype="float32", progress=False)
    assert fp32_resolved.path == tiny["resolved"].path.replace("-bfloat16", "-float32")
    assert fp32_resolved.manifest["dtype"] == "float32"
    fp32 = load_file(str(Path(fp32_resolved.path) / "model.safetensors"))
    for name, want in tiny["expected"].items():
        want = torch.from_numpy(want).reshape(fp32[name].shape)
        assert fp32[name].dtype == torch.float32 and torch.equal(fp32[name], want), name
        assert bf16[name].dtype == torch.bfloat16 and torch.equal(bf16[name], want.to(torch.bfloat16)), name
    assert set(bf16) == set(fp32)
    for name in fp32:  # every tensor, the ones the GGUF held as Q8_0 and the norms too
        assert torch.equal(bf16[name], fp32[name].to(torch.bfloat16)), name
    def tensor_bytes(tensors: dict) -> int:  # type: ignore[type-arg]
        return sum(t.numel() * t.element_size() for t in tensors.values())

    assert tensor_bytes(fp32) == 2 * tensor_bytes(bf16)  # half the bytes to read and to hold


def test_a_dtype_that_cannot_be_stored_is_refused(tiny: Tiny, tmp_path: Path) -> None:
    from selector.errors import UserError

    with pytest.raises(UserError, match="stored as bfloat16, float16, float32, not 'int8'"):
        models.resolve(tiny["model"], tmp_path, dtype="int8", progress=False)
    assert not (tmp_path / "models").exists()


def test_a_folder_of_the_first_format_is_not_read(tiny: Tiny, tmp_path: Path) -> None:
    """The first format kept float32 for every precision in models/<name>-<sha12>/: a resolve now
    neither reads it as the bf16 folder nor deletes it (it may hold a run of an older selector)."""
    import shutil

    sha = tiny["resolved"].manifest["gguf"]["sha256"]
    old = tmp_path / "models" / f"tiny-gguf-{sha[:12]}"
    shutil.copytree(models.resolve(tiny["model"], tiny["cache"], dtype="float32", progress=False).path, old)
    fresh = models.resolve(tiny["model"], tmp_path, progress=False)
    assert Path(fresh.path) == tmp_path / "models" / f"tiny-gguf-{sha[:12]}-bfloat16"
    assert fresh.manifest["dtype"] == "bfloat16" and (old / "manifest.json").is_file()


def test_reloads_offline_and_generation_stops_at_end_of_turn(tiny: Tiny, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    resolved = tiny["resolved"]
    tok = AutoTokenizer.from_pretrained(resolved.path, **resolved.load_kwargs())
    model = AutoModelForCausalLM.from_pretrained(resolved.path, **resolved.load_kwargs())
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|im_end|>"
    prompt = tok.apply_chat_template([{"role": "user", "content": "hello world"}], add_generation_prompt=True,
                                     return_tensors="pt", return_dict=True)
    out = model.generate(**prompt, max_new_tokens=5, do_sample=False)
    assert out.shape[1] - prompt["input_ids"].shape[1] == 5  # random weights: runs to max length

    # Make <|im_end|> the greedy choice: generation must stop right after it, from the saved config alone.
    head = torch.nn.Linear(HIDDEN, len(tok), bias=True, dtype=model.dtype)  # bf16: the folder's dtype
    with torch.no_grad():
        head.weight.zero_()
        head.bias.zero_()
        head.bias[tok.eos_token_id] = 1.0
    model.lm_head = head
    out = model.generate(**prompt, max_new_tokens=5, do_sample=False)
    assert out[0, prompt["input_ids"].shape[1]:].tolist() == [tok.convert_tokens_to_ids("<|im_end|>")]


def test_second_resolve_is_a_cache_hit(tiny: Tiny) -> None:
    folder = Path(tiny["resolved"].path)
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}
    again = models.resolve(tiny["model"], tiny["cache"], progress=False)
    assert again.path == tiny["resolved"].path
    # Nothing in the converted folder was written again (a timing check would flake on busy machines).
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()} == before
    assert again.manifest["created_at"] == tiny["resolved"].manifest["created_at"]
    ok, why = models.check_available(tiny["model"], cache_dir=tiny["cache"])
    assert ok and why.startswith("converted copy in")


def test_configured_sha_must_match_the_file(tiny: Tiny, tmp_path: Path) -> None:
    model = ModelConfig(name="tiny-gguf", source=SourceConfig(kind="gguf", path=str(tiny["gguf"]), sha256="0" * 64))
    with pytest.raises(ConfigError) as err:
        models.resolve(model, tmp_path, progress=False)
    assert err.value.field == "model.source.sha256"
    assert tiny["gguf"].exists()  # the user's own file is never deleted
    assert not (tmp_path / "models").exists()


def wheel_with(folder: Path, name: str, member: str, data: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    dist = name.replace("-", "_")
    path = folder / f"{dist}-1.0.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{dist}/__init__.py", "")
        wheel.writestr(f"{dist}/data/{member}", data)
        wheel.writestr(f"{dist}-1.0.0.dist-info/METADATA", f"Name: {name}\nVersion: 1.0.0\n")
    return path


def test_pypi_gguf_from_split_wheels_then_reuses_the_assembled_gguf(tiny: Tiny, tmp_path: Path) -> None:
    data = tiny["gguf"].read_bytes()
    cache = tmp_path / "cache"
    half = len(data) // 2
    wheels = [wheel_with(cache / "wheels", "tiny-part1", "tiny.gguf.part00", data[:half]),
              wheel_with(cache / "wheels", "tiny-part2", "tiny.gguf.part01", data[half:])]
    sha = hashlib.sha256(data).hexdigest()
    model = ModelConfig(name="tiny-pypi", source=SourceConfig(
        kind="pypi-gguf", packages=["tiny-part1==1.0.0", "tiny-part2==1.0.0"], member_suffix="", sha256=sha))

    first = models.resolve(model, cache, progress=False)
    assert first.manifest["gguf"]["sha256"] == sha and first.manifest["source"]["packages"] == model.source.packages
    assert (cache / "gguf" / "tiny-pypi.gguf").read_bytes() == data
    record = json.loads((cache / "gguf" / "tiny-pypi.json").read_text())
    assert [p["member"] for p in record["pieces"]] == ["tiny_part1/data/tiny.gguf.part00",
                                                      "tiny_part2/data/tiny.gguf.part01"]
    assert not any(w.exists() for w in wheels)  # the GGUF holds the same bytes

    # Without its converted folder (and without wheels or pip) the assembled GGUF is converted again.
    import shutil

    shutil.rmtree(first.path)
    second = models.resolve(model, cache, progress=False)
    assert second.path == first.path and (Path(second.path) / "manifest.json").is_file()


CHILD = """
import logging, sys
from pathlib import Path
logging.basicConfig(level=logging.WARNING, format="%(message)s")
from selector import models
from selector.config import ModelConfig, SourceConfig
m = ModelConfig(name="tiny-gguf", source=SourceConfig(kind="gguf", path=sys.argv[1]))
r = models.resolve(m, Path(sys.argv[2]), progress=False)
print(r.path, r.manifest["created_at"])
"""


def test_two_processes_convert_once(tiny: Tiny, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [sys.executable, "-c", CHILD, str(tiny["gguf"]), str(tmp_path / "cache")]
    procs = [subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in results]
    outputs = {out.strip() for out, _ in results}
    assert len(outputs) == 1  # same folder, same created_at
    assert sum(err.count("converting tiny.gguf") for _, err in results) == 1
