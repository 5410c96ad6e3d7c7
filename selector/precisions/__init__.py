"""Precision backends, by the `backend` name a precision config gives.

A backend is one module holding one `selector.precisions.base.Backend` subclass, plus one line
here (docs/precisions.md, "Adding a backend"). Each module imports its library only inside its
functions, so listing and validating configs works without the quantization libraries installed.
"""

from __future__ import annotations

from selector.registry import Registry

BACKENDS: Registry = Registry("precision backend")
BACKENDS.register("native", "selector.precisions.native:NativeBackend")
BACKENDS.register("bnb", "selector.precisions.bnb:BnbBackend")
BACKENDS.register("torchao", "selector.precisions.torchao_backend:TorchAoBackend")
BACKENDS.register("gptqmodel", "selector.precisions.gptqmodel_backend:GptqModelBackend")
BACKENDS.register("llmcompressor", "selector.precisions.llmcompressor_backend:LlmCompressorBackend")


def get_backend(name: str):
    return BACKENDS.get(name)()
