"""A real transformers folder (tiny random Llama + a tokenizer trained here) through `kind: local`:
validated, then loaded offline with the resolved kwargs; a damaged shard is caught before loading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from selector import models
from selector.config import ModelConfig, SourceConfig
from selector.models.validate import ModelFolderError

pytestmark = pytest.mark.fast  # make test-fast

CORPUS = ["the cat sat on the mat", "the food was great. Sentiment: positive", "what is 2 plus 3? 5"] * 10


def save_tiny_llama(folder: Path, max_shard_size: str | None = None) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models as tok_models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    raw = Tokenizer(tok_models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    raw.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=100, special_tokens=["<s>", "</s>"]))
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<s>", eos_token="</s>", pad_token="</s>")
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, bos_token_id=0, eos_token_id=1, pad_token_id=1)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(folder, **kwargs)
    tok.save_pretrained(folder)


def local(folder: Path) -> ModelConfig:
    return ModelConfig(name="tiny-llama", source=SourceConfig(kind="local", path=str(folder)))


def test_resolve_and_load_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tmp_path / "tiny"
    save_tiny_llama(folder)
    resolved = models.resolve(local(folder), tmp_path / "cache")
    assert resolved.manifest["weight_files"] == ["model.safetensors"]

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tok = AutoTokenizer.from_pretrained(resolved.path, **resolved.load_kwargs())
    model = AutoModelForCausalLM.from_pretrained(resolved.path, **resolved.load_kwargs())
    assert sum(p.numel() for p in model.parameters()) > 0
    ids = tok("the cat", return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=3, do_sample=False, min_new_tokens=3)
    assert out.shape[1] == ids["input_ids"].shape[1] + 3


def test_sharded_save_validates_and_a_truncated_shard_is_caught(tmp_path: Path) -> None:
    folder = tmp_path / "sharded"
    save_tiny_llama(folder, max_shard_size="20KB")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1
    resolved = models.resolve(local(folder), tmp_path / "cache")
    assert resolved.artifact_bytes() == sum((folder / s).stat().st_size for s in shards)

    victim = folder / shards[-1]
    victim.write_bytes(victim.read_bytes()[:-64])
    with pytest.raises(ModelFolderError) as err:
        models.resolve(local(folder), tmp_path / "cache")
    assert str(err.value).startswith(str(victim)) and "truncated" in str(err.value)
