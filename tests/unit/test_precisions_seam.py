"""Adding a backend is one file plus one registration line: a backend written here, in a module of
its own, is registered and then planned, keyed, checked and loaded by the same code as the shipped
ones, with nothing else taught about it."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from selector.config import CalibrationConfig, ModelConfig, PrecisionConfig, SelectorConfig, SourceConfig
from selector.engines.inprocess.engine import HfEngineConfig
from selector.errors import ConfigError
from selector.precisions import BACKENDS, get_backend

FAKE = '''
"""A backend that keeps every weight in 16 bits but says it takes 1 byte per parameter."""
from dataclasses import dataclass
from typing import Literal

from selector.precisions import weights
from selector.precisions.base import Backend, LoadedModel, load_tokenizer, torch_dtype


@dataclass(frozen=True)
class HalfParams:
    mode: Literal["fast", "slow"] = "fast"


class HalfBackend(Backend):
    name = "half"
    library = "json"  # installed everywhere
    Params = HalfParams
    calibrates = True

    def unsupported(self, precision, device):
        return "" if precision.method == "half" else f"half has no method {precision.method!r}"

    def estimate_weights(self, arch, precision, device, holding="in-process", prequantized=False):
        return weights.WeightEstimate(arch.params, f"one byte per parameter ({self.params(precision).mode})")

    def load_base(self, resolved, precision, ctx):
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(resolved.path, dtype=torch_dtype(precision.dtype),
                                                     **resolved.load_kwargs()).eval()
        return LoadedModel(model, load_tokenizer(resolved), ctx.device)
'''


@pytest.fixture
def half(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "half_backend.py").write_text(textwrap.dedent(FAKE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(BACKENDS, "_targets", dict(BACKENDS._targets))  # restored after the test
    BACKENDS.register("half", "half_backend:HalfBackend")  # the one registration line
    yield "half"
    sys.modules.pop("half_backend", None)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny"))


def config(tiny: Path, backend: str, method: str = "half", cache: Path | None = None, **params: object) -> SelectorConfig:
    model = ModelConfig(name="tiny", source=SourceConfig(kind="local", path=str(tiny)))
    prec = PrecisionConfig(name="h8", backend=backend, method=method, bits=8, params=dict(params))
    return SelectorConfig(model=model, precision=prec, cache_dir=str(cache or tiny.parent / "cache"), device="cpu",
                          engine=HfEngineConfig())


def test_plan_asks_the_new_backend(half: str, tiny: Path) -> None:
    from selector.plan.arch import read_arch
    from selector.plan.estimate import estimate_weights, plan_row

    cfg = config(tiny, half, mode="slow")
    arch = read_arch(cfg.model, Path(cfg.cache_dir))
    est = estimate_weights(arch, cfg.precision, "cuda")
    assert est.bytes == arch.params and est.layout == "one byte per parameter (slow)"
    assert plan_row(cfg, batch=1, context=16, gpu_gib=1, device="cuda").weight_bytes == arch.params


def test_its_params_are_typed_and_checked_in_preflight(half: str, tiny: Path) -> None:
    from selector.variant.availability import check_precision

    check_precision(config(tiny, half, mode="fast"))
    with pytest.raises(ConfigError) as err:
        check_precision(config(tiny, half, mode="quick"))
    assert err.value.field == "precision.params.mode" and "one of 'fast', 'slow'" in err.value.problem
    with pytest.raises(ConfigError, match="backend half has no param 'group_size'"):
        check_precision(config(tiny, half, group_size=64))


def test_keys_cover_calibration_because_it_says_it_calibrates(half: str, tiny: Path) -> None:
    from selector.variant.keys import keys_of

    def key(backend: str, seed: int) -> str:
        cfg = config(tiny, backend, method="half" if backend == half else None)
        cfg.calibration = CalibrationConfig(seed=seed)
        return keys_of(cfg, "evalset-hash").variant

    assert key(half, 0) != key(half, 1)
    assert key("native", 0) == key("native", 1)  # native does not calibrate: its key ignores calibration


def test_availability_asks_it(half: str, tiny: Path) -> None:
    from selector.variant.availability import availability

    assert availability(config(tiny, half)) == (True, "")
    ok, why = availability(config(tiny, half, method="third"))
    assert not ok and why == "precision=h8 is not available on cpu: half has no method 'third'"


def test_the_base_loads_it_and_records_its_kernel(half: str, tiny: Path, tmp_path: Path) -> None:
    from selector.models import resolve
    from selector.precisions.base import LoadContext

    cfg = config(tiny, half, cache=tmp_path)
    ctx = LoadContext(model_cfg=cfg.model, device="cpu", cache_dir=tmp_path, calibration=CalibrationConfig())
    loaded = get_backend(half).load(resolve(cfg.model, tmp_path), cfg.precision, ctx)
    k = loaded.kernel
    assert (k.backend, k.kernel, k.linear_class) == ("half", "half-half", "torch.nn.modules.linear.Linear")
    # It claims to quantize, yet its 14 layers are plain Linear: the record says unpacked.
    assert (k.quantized_layers, k.plain_layers, k.unpacked) == (0, 14, True)
