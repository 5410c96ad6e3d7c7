"""Tiny real models built in the test: a tokenizer trained here and a randomly initialised causal LM.

Nothing is downloaded. The model is a real transformers LlamaForCausalLM saved as safetensors, so
every code path (loading, quantizing, generating, scoring) runs exactly as for a hub model.
"""

from __future__ import annotations

from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "The food was great and the staff were lovely. Sentiment: positive",
    "Terrible service, cold soup, never again. Sentiment: negative",
    "Alice lives in Paris and works at the museum on 2021-03-14.",
    "Bob bought 3 apples and 4 pears. How many fruits? Answer: 7",
    "def add(a, b):\n    return a + b\n",
    "Order number 4521 was shipped to Berlin on March 3.",
    "What is 12 plus 30? The answer is 42.",
] * 20


def evalset_corpus() -> list[str]:
    """Every line of the default eval set's files. A tokenizer trained on CORPUS alone encodes the
    eval set's few-shot prompts nearly a byte per token (a thousand tokens each); trained on these
    too, with a larger vocabulary, in a few hundred: for a model wide enough that its prompts' length,
    not its loading, is what a sweep on it spends."""
    from selector.paths import DEFAULT_EVALSET

    return [line for f in sorted(Path(DEFAULT_EVALSET).iterdir()) for line in f.read_text().splitlines() if line]


def build_tokenizer(out: Path, vocab_size: int = 512, corpus: list[str] | None = None):  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus or CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", unk_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def build_tiny_llama(out: Path, hidden: int = 64, layers: int = 2, seed: int = 0, heads: int = 4,
                     talkative: bool = False, vocab_size: int = 512, corpus: list[str] | None = None) -> Path:
    """A ~0.1M-parameter Llama with a trained tokenizer, saved to `out` (safetensors).
    heads: attention heads (key/value heads: half as many); vLLM's CPU attention needs a head size
    of 32 or more (build_vllm_llama).
    vocab_size, corpus: the tokenizer's (build_tokenizer).
    talkative: zero the (tied) embedding rows of end-of-sequence and of every token holding a
    newline, so their logits are 0 where the random model's greedy choice was a newline (which the
    tasks' stop sequences cut at once): it then generates every token a request allows."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    out = Path(out)
    tok = build_tokenizer(out, vocab_size, corpus)
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=max(1, heads // 2), max_position_embeddings=1024,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    if talkative:
        quiet = [i for i in range(len(tok)) if "\n" in tok.decode([i])] + [tok.eos_token_id]
        with torch.no_grad():
            model.model.embed_tokens.weight[quiet] = 0.0
    model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                                               bos_token_id=tok.bos_token_id)
    model.save_pretrained(out, safe_serialization=True)
    return out


def build_vllm_llama(out: Path) -> Path:
    """The tiny Llama in a shape vLLM's CPU build serves and int4 group quantization (groups of
    128 inputs) can pack: hidden 128 in 2 heads of 64 (~0.2M parameters); talkative, so a load
    test's requests decode every token they ask for."""
    return build_tiny_llama(out, hidden=128, heads=2, talkative=True)


def write_model_config(conf_dir: Path, name: str, model_dir: Path, prompt_style: str = "chat") -> Path:
    """A user's own config folder with model/<name>.yaml pointing at a local folder."""
    path = Path(conf_dir) / "model" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"name: {name}\nfamily: tiny\nparams_b: 0.0001\nsource:\n  kind: local\n  path: {model_dir}\n"
        f"prompt_style: {prompt_style}\n"
    )
    return path
