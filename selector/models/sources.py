"""The source-kind registry and what every source kind is handed.

A source kind is a class with `resolve(ctx) -> ResolvedModel` and `check_available(ctx) -> (ok, reason)`.
Each lives in its own module, imported only when its kind is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from selector.config import ModelConfig, SourceConfig
from selector.errors import ConfigError
from selector.models.cache import DEFAULT_STORE_DTYPE, CacheLayout
from selector.models.resolved import ResolvedModel
from selector.origin import Origin
from selector.registry import Registry, UnknownNameError

SOURCES: Registry[type] = Registry("model source kind")
SOURCES.register("hub", "selector.models.hub:HubSource")
SOURCES.register("local", "selector.models.local:LocalSource")
SOURCES.register("gguf", "selector.models.gguf_file:GgufSource")
SOURCES.register("pypi-gguf", "selector.models.pypi_gguf:PypiGgufSource")


@dataclass
class SourceContext:
    model: ModelConfig
    source: SourceConfig
    field: str  # where `source` sits in the model config: "source" or "prequantized.<precision>"
    cache: CacheLayout
    progress: bool = True
    prequantized: bool = False
    dtype: str = DEFAULT_STORE_DTYPE  # what a GGUF is converted to: the dtype the precision loads

    @property
    def label(self) -> str:
        """The name cache files are kept under (a pre-quantized source gets its own)."""
        if self.prequantized:
            return f"{self.model.name}-{self.field.split('.', 1)[1]}"
        return self.model.name

    def error(self, key: str, problem: str) -> ConfigError:
        """A ConfigError naming the model's YAML file and line (when it is one of ours) and the field."""
        return config_error(self.model.name, f"{self.field}.{key}" if key else self.field, problem)


class Source(Protocol):
    def resolve(self, ctx: SourceContext) -> ResolvedModel: ...

    def check_available(self, ctx: SourceContext) -> tuple[bool, str]: ...


def config_error(model_name: str, field: str, problem: str) -> ConfigError:
    """A ConfigError at `model.<field>` of the model's config file (with its line)."""
    return Origin({"model": model_name}).error(f"model.{field}", problem)


def get_source(ctx: SourceContext) -> Source:
    try:
        cls = SOURCES.get(ctx.source.kind)
    except UnknownNameError as e:
        raise ctx.error("kind", str(e)) from None
    return cls()  # type: ignore[no-any-return]
