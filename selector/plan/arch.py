"""A model's architecture facts (layers, widths, heads, vocabulary, tied embeddings) read without
its weights: from a config.json (the model's `arch_config`, a converted copy in the cache, a local
folder, the local Hugging Face cache) or from a GGUF file's metadata. Nothing is downloaded."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from selector.config import CONF_DIR, ModelConfig
from selector.errors import ConfigError
from selector.paths import find_path

PROJECT_ROOT = CONF_DIR.parent  # the package; a relative arch_config is found as selector.paths.find_path says


@dataclass(frozen=True)
class ArchFacts:
    """What weight and KV-cache sizes depend on, as a transformers config.json states it."""

    model_type: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    intermediate_size: int
    tie_word_embeddings: bool
    attention_bias: bool = False
    sliding_window: int | None = None
    layer_types: tuple[str, ...] = ()  # "full_attention" / "sliding_attention" per layer, when mixed
    source: str = ""  # where the facts were read
    context_length: int | None = None  # max_position_embeddings: the longest prompt + output it takes

    @classmethod
    def from_config(cls, cfg: dict[str, Any], source: str) -> ArchFacts:
        text = cfg.get("text_config") or cfg  # multimodal configs nest the language model
        try:
            hidden, heads = int(text["hidden_size"]), int(text["num_attention_heads"])
            model_type = str(text.get("model_type", ""))
            return cls(
                model_type=model_type,
                hidden_size=hidden,
                num_layers=int(text["num_hidden_layers"]),
                num_heads=heads,
                num_kv_heads=int(text.get("num_key_value_heads") or heads),
                head_dim=int(text.get("head_dim") or hidden // heads),
                vocab_size=int(text["vocab_size"]),
                intermediate_size=int(text["intermediate_size"]),
                tie_word_embeddings=bool(cfg.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
                # Qwen2 always has q/k/v biases; Llama-style configs say so in attention_bias.
                attention_bias=bool(text.get("attention_bias", model_type == "qwen2")),
                sliding_window=text.get("sliding_window"),
                layer_types=tuple(text.get("layer_types") or ()),
                source=source,
                context_length=int(text["max_position_embeddings"]) if text.get("max_position_embeddings") else None,
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(source, field=str(e).strip("'"), problem="not a usable transformers config.json "
                              "(needs hidden_size, num_hidden_layers, num_attention_heads, vocab_size, "
                              "intermediate_size)") from None

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def linear_shapes(self) -> list[tuple[int, int]]:
        """(in_features, out_features) of every quantizable Linear in one decoder layer."""
        h, i = self.hidden_size, self.intermediate_size
        return [(h, self.q_dim), (h, self.kv_dim), (h, self.kv_dim), (self.q_dim, h),  # q k v o
                (h, i), (h, i), (i, h)]  # gate up down

    def param_groups(self) -> dict[str, int]:
        """Parameter counts by how precisions treat them."""
        h = self.hidden_size
        gemma = self.model_type.startswith("gemma")
        qk_norm = self.model_type.startswith(("gemma3", "qwen3"))
        linear = self.num_layers * sum(a * b for a, b in self.linear_shapes())
        per_layer_small = (4 if gemma else 2) * h  # RMSNorm weights
        per_layer_small += (self.q_dim + 2 * self.kv_dim) if self.attention_bias else 0
        per_layer_small += 2 * self.head_dim if qk_norm else 0
        return {
            "embed": self.vocab_size * h,
            "lm_head": 0 if self.tie_word_embeddings else self.vocab_size * h,
            "linear": linear,
            "small": self.num_layers * per_layer_small + h,  # + the final norm
        }

    @property
    def params(self) -> int:
        return sum(self.param_groups().values())

    def kv_tokens_per_layer(self, context: int) -> list[int]:
        """Cached tokens per layer: sliding-window layers keep at most their window."""
        if self.layer_types and self.sliding_window:
            return [min(context, int(self.sliding_window)) if t == "sliding_attention" else context
                    for t in self.layer_types]
        return [context] * self.num_layers


def read_arch(model: ModelConfig, cache_dir: Path) -> ArchFacts | None:
    """The model's architecture from the first place that has it, without network or conversion."""
    for source in _config_candidates(model, Path(cache_dir).expanduser()):
        if source.suffix == ".gguf":
            return _arch_from_gguf(source)
        return ArchFacts.from_config(json.loads(source.read_text()), _shown(source))
    return None


def _config_candidates(model: ModelConfig, cache_dir: Path) -> Iterable[Path]:
    from selector.models.cache import CacheLayout, converted_dir, safe_name
    from selector.models.sources import config_error

    if model.arch_config:
        path = Path(model.arch_config).expanduser()
        path = find_path(path)
        if not path.is_file():
            raise config_error(model.name, "arch_config", f"{_shown(path)}: no such file")
        yield path
    src = model.source
    cache = CacheLayout(cache_dir)
    folder = converted_dir(cache, model.name, src.sha256)  # a GGUF source converted once
    if folder is None:  # no configured sha256: the newest converted copy under this name
        found = sorted(cache.root.glob(f"models/{safe_name(model.name)}-*/manifest.json"),
                       key=lambda p: p.stat().st_mtime)
        folder = found[-1].parent if found else None
    if folder is not None and (folder / "config.json").is_file():
        yield folder / "config.json"
    if src.kind == "local" and src.path and (Path(src.path).expanduser() / "config.json").is_file():
        yield Path(src.path).expanduser() / "config.json"
    if src.kind == "hub" and src.repo_id:
        from selector.models.hub import cached_file

        hit = cached_file(src.repo_id, "config.json", src.revision)
        if hit:
            yield Path(hit)
    for gguf in (cache.gguf_file(model.name), Path(src.path).expanduser() if src.kind == "gguf" and src.path else None):
        if gguf is not None and gguf.is_file():
            yield gguf


def _arch_from_gguf(path: Path) -> ArchFacts:
    """Facts from GGUF metadata (llama.cpp's key names), for a model not converted yet."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))

    def get(key: str, default: Any = None) -> Any:
        f = reader.fields.get(key)
        return f.contents() if f is not None else default

    arch = get("general.architecture")
    hidden, heads = int(get(f"{arch}.embedding_length")), int(get(f"{arch}.attention.head_count"))
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    vocab = get(f"{arch}.vocab_size") or (len(tokens.data) if tokens is not None else 0)
    return ArchFacts(
        model_type={"gemma3": "gemma3_text"}.get(arch, arch),
        hidden_size=hidden,
        num_layers=int(get(f"{arch}.block_count")),
        num_heads=heads,
        num_kv_heads=int(get(f"{arch}.attention.head_count_kv", heads)),
        head_dim=int(get(f"{arch}.attention.key_length", hidden // heads)),
        vocab_size=int(vocab),
        intermediate_size=int(get(f"{arch}.feed_forward_length")),
        tie_word_embeddings=not any(t.name == "output.weight" for t in reader.tensors),
        attention_bias=any(t.name == "blk.0.attn_q.bias" for t in reader.tensors),
        source=f"{_shown(path)} (GGUF metadata)",
        context_length=int(get(f"{arch}.context_length")) if get(f"{arch}.context_length") else None,
    )


def _shown(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(PROJECT_ROOT))
    except ValueError:
        return str(path)
