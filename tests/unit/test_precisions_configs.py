"""Every shipped precision config validates, names a registered backend, and says up front whether
it can run on CPU."""

from __future__ import annotations

import pytest

from selector.config import CONF_DIR, PrecisionConfig
from selector.precisions import BACKENDS, get_backend
from tests.factories import shipped_precision
from tests.tiers import backend_case, precision_case

NAMES = sorted(p.stem for p in (CONF_DIR / "precision").glob("*.yaml"))
CPU_UNAVAILABLE = {"int4-torchao"}


def test_the_issue_precisions_ship() -> None:
    wanted = {"fp32", "bf16", "fp16", "int8", "nf4", "int8-torchao", "gptq-int4", "gptq-int8", "awq-int4",
              "awq-int4-gptqmodel", "gptq-int4-llmcompressor"}
    assert wanted <= set(NAMES)


@pytest.mark.parametrize("name", [precision_case(n) for n in NAMES])
def test_precision_config(name: str) -> None:
    cfg = shipped_precision(name)
    assert cfg.name == name and cfg.description
    assert cfg.backend in BACKENDS
    ok, why = get_backend(cfg.backend).availability(cfg, "cpu")
    if name in CPU_UNAVAILABLE:
        assert not ok and why
    else:
        assert ok, why


def test_the_default_awq_is_llmcompressor_and_gptq_is_gptqmodel() -> None:
    assert (shipped_precision("awq-int4").backend, shipped_precision("awq-int4").method) == ("llmcompressor", "awq")
    assert (shipped_precision("gptq-int4").backend, shipped_precision("gptq-int4").method) == ("gptqmodel", "gptq")
    assert shipped_precision("awq-int4-gptqmodel").dtype == "bfloat16"  # its CPU kernel has no float32


@pytest.mark.parametrize(
    ("backend", "method", "bits", "reason"),
    [backend_case(case[0], *case) for case in [
        ("gptqmodel", "rtn", 4, "not one of"),
        ("gptqmodel", "gptq", 5, "supports bits"),
        ("gptqmodel", "awq", 8, "supports bits"),
        ("llmcompressor", "smoothquant", 4, "not one of"),
        ("llmcompressor", "gptq", 3, "bits"),
        ("torchao", "fp8", 8, "not one of"),
        ("bnb", "int4", 4, "not int8 or nf4"),
    ]],
)
def test_unsupported_combinations_are_refused_with_a_reason(backend: str, method: str, bits: int, reason: str) -> None:
    cfg = PrecisionConfig(name="x", backend=backend, method=method, bits=bits)
    ok, why = get_backend(backend).availability(cfg, "cpu")
    assert not ok and reason in why
