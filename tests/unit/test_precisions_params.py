"""Typed precision params: an unknown or ill-typed param is a ConfigError naming the config file, its
line and the field, raised before anything loads and without importing the backend's library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from selector.config import CONF_DIR, PrecisionConfig
from selector.yaml_lines import yaml_line
from selector.errors import ConfigError
from selector.precisions import get_backend
from selector.origin import Origin

ROOT = Path(__file__).resolve().parents[2]


def shipped(name: str, **params: object) -> PrecisionConfig:
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(PrecisionConfig),
                                              OmegaConf.load(CONF_DIR / "precision" / f"{name}.yaml")))
    assert isinstance(cfg, PrecisionConfig)
    cfg.params.update(params)
    return cfg


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONF_DIR / "precision").glob("*.yaml")))
def test_every_shipped_precision_has_valid_params(name: str) -> None:
    cfg = shipped(name)
    params = get_backend(cfg.backend).params(cfg)
    for key, value in cfg.params.items():
        assert getattr(params, key) == value


def test_typed_params_carry_defaults_and_the_given_values() -> None:
    params = get_backend("gptqmodel").params(shipped("gptq-int4"))
    assert (params.group_size, params.batch_size, params.kernel, params.sym, params.desc_act) == (128, 4, "auto", True, False)
    assert params.library_params() == {"sym": True, "desc_act": False}  # what reaches gptqmodel (and the artifact key)
    assert get_backend("llmcompressor").params(shipped("awq-int4", kernel="dense")).kernel == "dense"


def test_an_unknown_param_names_file_line_field_and_the_close_match() -> None:
    cfg = shipped("gptq-int4", grup_size=64)
    with pytest.raises(ConfigError) as err:
        get_backend("gptqmodel").params(cfg)
    params_line = yaml_line(CONF_DIR / "precision" / "gptq-int4.yaml", ["params"])
    assert err.value.where.endswith(f"conf/precision/gptq-int4.yaml:{params_line}")
    assert err.value.field == "precision.params.grup_size"
    assert "Did you mean 'group_size'?" in err.value.problem and "backend gptqmodel" in err.value.problem


def test_an_ill_typed_param_points_at_its_own_line() -> None:
    cfg = shipped("gptq-int4", group_size="big")
    with pytest.raises(ConfigError) as err:
        get_backend("gptqmodel").params(cfg)
    lines = (CONF_DIR / "precision" / "gptq-int4.yaml").read_text().splitlines()
    assert err.value.where.endswith(f"conf/precision/gptq-int4.yaml:{lines.index(next(x for x in lines if 'group_size' in x)) + 1}")
    assert err.value.field == "precision.params.group_size" and "must be an integer, got 'big'" in err.value.problem


@pytest.mark.parametrize(("backend_name", "precision_name", "params", "field", "needle"), [
    ("gptqmodel", "gptq-int4", {"kernel": "marlim"}, "precision.params.kernel", "one of 'auto', 'marlin'"),
    ("gptqmodel", "gptq-int4", {"batch_size": True}, "precision.params.batch_size", "must be an integer"),
    ("gptqmodel", "gptq-int4", {"sym": "yes"}, "precision.params.sym", "true or false"),
    ("llmcompressor", "awq-int4", {"ignore": "lm_head"}, "precision.params.ignore", "a list (a string each)"),
    ("llmcompressor", "awq-int4", {"actorder": "group"}, "precision.params.actorder", "does not apply to method awq"),
    ("llmcompressor", "awq-int4", {"kernel": "gemm"}, "precision.params.kernel", "one of"),
    ("llmcompressor", "awq-int4", {"batch_size": 0}, "precision.params.batch_size", "must be at least 1, got 0"),
    ("native", "bf16", {"group_size": 64}, "precision.params.group_size", "backend native has no param"),
    ("bnb", "int8", {"llm_int8_threshold": "six"}, "precision.params.llm_int8_threshold", "must be a number"),
    ("torchao", "int8-torchao", {"granularity": "row"}, "precision.params.granularity", "has no param"),
])
def test_bad_params_per_backend(backend_name: str, precision_name: str, params: dict, field: str, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        get_backend(backend_name).params(shipped(precision_name, **params))
    assert err.value.field == field and needle in err.value.problem, err.value
    assert f"conf/precision/{precision_name}.yaml" in err.value.where


def test_a_param_set_on_the_command_line_says_so() -> None:
    cfg = shipped("gptq-int4", group_size=[64])
    with pytest.raises(ConfigError) as err:
        get_backend("gptqmodel").params(cfg, Origin(given=frozenset({"precision.params.group_size"})))
    assert err.value.where == "command line" and err.value.field == "precision.params.group_size"


def test_a_users_own_precision_file_is_named_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "precision" / "my-gptq.yaml"
    path.parent.mkdir()
    path.write_text("name: my-gptq\nbackend: gptqmodel\nmethod: gptq\nbits: 4\nparams:\n  group_size: 64\n  kernal: marlin\n")
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(PrecisionConfig), OmegaConf.load(path)))
    with pytest.raises(ConfigError) as err:
        get_backend("gptqmodel").params(cfg, Origin(dirs=(tmp_path,)))  # type: ignore[arg-type]
    assert err.value.where == f"{path}:7" and err.value.field == "precision.params.kernal" and "Did you mean 'kernel'?" in err.value.problem


def test_params_are_checked_without_importing_the_quantization_libraries() -> None:
    code = (
        "import sys\n"
        "from selector.config import PrecisionConfig\n"
        "from selector.precisions import get_backend\n"
        "from selector.errors import ConfigError\n"
        "for backend, method in (('gptqmodel', 'gptq'), ('llmcompressor', 'awq'), ('bnb', 'nf4'), ('torchao', 'int8_weight_only')):\n"
        "    get_backend(backend).params(PrecisionConfig(name='x', backend=backend, method=method, params={}))\n"
        "    try:\n"
        "        get_backend(backend).params(PrecisionConfig(name='x', backend=backend, method=method, params={'nope': 1}))\n"
        "    except ConfigError:\n"
        "        pass\n"
        "print(sorted(m for m in ('gptqmodel', 'llmcompressor', 'bitsandbytes', 'torchao', 'torch', 'transformers') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_w8a8_needs_eight_bits_per_channel_weights_and_the_dense_kernel() -> None:
    backend = get_backend("llmcompressor")
    params = backend.params(shipped("int8-w8a8"))
    assert (params.activations, params.group_size, params.symmetric) == ("int8", 0, True)
    for changed, problem in [({"group_size": 128}, "need bits: 8 and per-channel weights"),
                             ({"kernel": "marlin"}, "runs dense in-process")]:
        with pytest.raises(ConfigError) as err:
            backend.params(shipped("int8-w8a8", **changed))
        assert problem in err.value.problem
    four = shipped("int8-w8a8")
    four.bits = 4
    with pytest.raises(ConfigError, match="not bits 4 and group_size 0"):
        backend.params(four)
    # In-process it runs dense on every device (activations quantized on the fly); a GPU does not
    # convert it to a weight-only GPTQ kernel.
    for device, capability in (("cpu", None), ("cuda:0", (9, 0))):
        decision = backend.kernel_decision(shipped("int8-w8a8"), device, capability)
        assert decision.ok and [k.name for k in decision.candidates] == ["dense"], decision


def test_llmcompressor_batches_calibration_samples_only_when_they_are_one_length() -> None:
    from selector.precisions.llmcompressor_backend import calibration_batch

    same = [[1] * 256] * 16
    assert calibration_batch(same, 16) == 16
    assert calibration_batch(same, 4) == 4
    assert calibration_batch(same[:3], 16) == 3  # never more than there are samples
    # A batch of unequal samples would be cut to its shortest: one at a time keeps every token.
    assert calibration_batch([[1] * 256, [1] * 200, [1] * 256], 16) == 1
    assert get_backend("llmcompressor").params(shipped("awq-int4")).batch_size == 16
