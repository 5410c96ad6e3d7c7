"""Model sources: turn a model config's `source` into a folder transformers can load (or a hub id).

    resolved = resolve(cfg.model, cache_dir, precision="awq-int4", dtype="bfloat16")
    model = AutoModelForCausalLM.from_pretrained(resolved.path, **resolved.load_kwargs())

Source kinds (selector/models/sources.py): hub, local, gguf, pypi-gguf. GGUF sources are converted
once per dtype to safetensors in the cache, in the dtype the precision loads (`dtype`, bf16 unless
said): see docs/models.md for the layout and safety rules.
"""

from __future__ import annotations

from pathlib import Path

from selector.config import ModelConfig
from selector.models.cache import DEFAULT_STORE_DTYPE, CacheLayout, default_cache_dir
from selector.models.resolved import ResolvedModel
from selector.models.sources import SOURCES, SourceContext, config_error, get_source

__all__ = ["ResolvedModel", "SOURCES", "check_available", "default_cache_dir", "resolve"]

PREQUANTIZED_KINDS = {"hub", "local"}


def resolve(model: ModelConfig, cache_dir: Path, *, precision: str | None = None, dtype: str | None = None,
            progress: bool = True) -> ResolvedModel:
    """A loadable location for `model`; when `precision` names one of `model.prequantized`, the
    pre-quantized checkpoint instead (with `prequantized=True`). `dtype`: the precision's load dtype,
    which a GGUF source is converted to (default bfloat16). Raises UserError on bad input."""
    ctx = _context(model, Path(cache_dir), precision, progress, dtype)
    return get_source(ctx).resolve(ctx)


def is_ready(model: ModelConfig, cache_dir: Path, *, precision: str | None = None, dtype: str | None = None) -> bool:
    """Whether `resolve` would only find what is already there (nothing to convert or assemble)."""
    ctx = _context(model, Path(cache_dir), precision, progress=False, dtype=dtype)
    ready = getattr(get_source(ctx), "is_ready", None)
    return True if ready is None else bool(ready(ctx))


def check_available(model: ModelConfig, *, precision: str | None = None, dtype: str | None = None,
                    cache_dir: Path | None = None) -> tuple[bool, str]:
    """(ok, reason): can this model be had here, without downloading or converting anything?
    Answers within seconds (network checks are bounded). A bad config still raises ConfigError."""
    ctx = _context(model, Path(cache_dir) if cache_dir else default_cache_dir(), precision, progress=False,
                   dtype=dtype)
    return get_source(ctx).check_available(ctx)


def _context(model: ModelConfig, cache_dir: Path, precision: str | None, progress: bool,
             dtype: str | None = None) -> SourceContext:
    cache = CacheLayout(cache_dir.expanduser())
    if precision and precision in model.prequantized:
        source = model.prequantized[precision]
        if source.kind not in PREQUANTIZED_KINDS:
            raise config_error(model.name, f"prequantized.{precision}.kind",
                               f"a pre-quantized checkpoint must be kind hub or local, not {source.kind!r} "
                               "(a GGUF source is dequantized)")
        return SourceContext(model, source, f"prequantized.{precision}", cache, progress, prequantized=True)
    return SourceContext(model, model.source, "source", cache, progress, dtype=dtype or DEFAULT_STORE_DTYPE)
