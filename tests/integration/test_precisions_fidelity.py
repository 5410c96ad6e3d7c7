"""measure_fidelity as the runner calls it: the baseline run writes the probe file, a variant reads
it, and a variant without one gets it from ensure_reference (what the variant's preparation process
runs before the variant loads: the baseline through selector.models, written, freed)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from selector.compose import compose
from selector.config import CalibrationConfig, ModelConfig, SelectorConfig, SourceConfig, to_dict
from selector.measure.fidelity import (
    PROBE_POSITIONS,
    TOP_K,
    load_reference,
    measure_fidelity,
    probe_token_ids,
)
from selector import precisions
from selector.variant.reference import ensure_reference
from selector.engines.inprocess.engine import HfEngineConfig, InProcessRunning
from selector.tasks import load_evalset
from selector.paths import DEFAULT_EVALSET
from tests.factories import selector_config
from tests.integration.test_precisions_backends import build_model

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("fidelity")
    model_dir = build_model(root / "tiny", hidden=128, layers=2)
    model = ModelConfig(name="tiny", source=SourceConfig(kind="local", path=str(model_dir)), prompt_style="chat")
    tasks = load_evalset(DEFAULT_EVALSET, limit=2)  # 4 tasks x 2 items = 8 probe prompts
    return root, model, tasks


def cfg_for(root: Path, model: ModelConfig, name: str) -> SelectorConfig:
    return selector_config(root / "cache", model, name, calibration=CalibrationConfig(num_samples=4, seq_len=64))


def load_variant(cfg: SelectorConfig) -> InProcessRunning:
    """The variant loaded as a sweep loads it, in the in-process engine fidelity is measured through."""
    loaded = precisions.load_variant(cfg.model, cfg.precision, cfg.cache_dir, "cpu", calibration=cfg.calibration,
                                     progress=False)[1]
    return InProcessRunning(HfEngineConfig(), loaded)


def fidelity_files(root: Path) -> list[Path]:
    folder = root / "cache" / "fidelity"
    return sorted(folder.glob("*.safetensors")) if folder.exists() else []


@pytest.mark.quant("bitsandbytes")
@pytest.mark.fast
def test_baseline_writes_the_probe_file_and_variants_compare_against_it(setup) -> None:  # type: ignore[no-untyped-def]
    root, model, tasks = setup
    base_cfg = cfg_for(root, model, "bf16")
    baseline = load_variant(base_cfg)
    assert measure_fidelity(baseline, tasks, base_cfg) is None  # the baseline has nothing to compare with
    files = fidelity_files(root)
    assert len(files) == 1 and files[0].name.startswith("tiny-")
    ref = load_reference(files[0])
    probes = probe_token_ids(baseline, tasks, base_cfg)
    assert len(probes) == 8 + 4  # eval prompts + corpus texts
    positions = sum(min(PROBE_POSITIONS, len(p)) for p in probes)
    assert ref.ids.shape == (positions, TOP_K) and ref.rest.shape == (positions,)
    assert (ref.logp[:, :-1] >= ref.logp[:, 1:]).all()  # most likely first
    mass = ref.logp.exp().sum(-1) + ref.rest.exp()
    assert torch.allclose(mass, torch.ones_like(mass), atol=1e-4)

    int8_cfg = cfg_for(root, model, "int8")
    result = measure_fidelity(load_variant(int8_cfg), tasks, int8_cfg)
    assert result is not None and result.baseline == "tiny/bf16" and result.positions == positions
    assert 0 < result.mean_kl < 1e-2 and 0.7 <= result.top1_agreement <= 1.0
    nf4_cfg = cfg_for(root, model, "nf4")
    nf4 = measure_fidelity(load_variant(nf4_cfg), tasks, nf4_cfg)
    assert nf4 is not None and nf4.mean_kl > result.mean_kl and nf4.top1_agreement < result.top1_agreement
    assert fidelity_files(root) == files  # variants read the file, they do not write another


@pytest.mark.quant("bitsandbytes")
@pytest.mark.fast
def test_a_variant_without_a_probe_file_gets_it_from_ensure_reference(setup) -> None:  # type: ignore[no-untyped-def]
    from selector.measure.fidelity import reference_exists

    root, model, tasks = setup
    int8_cfg = cfg_for(root, model, "int8")
    loaded = load_variant(int8_cfg)
    with_file = measure_fidelity(loaded, tasks, int8_cfg)
    for f in fidelity_files(root):
        f.unlink()
    assert not reference_exists(int8_cfg, tasks, loaded.tokenizer)
    assert measure_fidelity(loaded, tasks, int8_cfg) is None  # no second model in the variant's process
    said = ensure_reference(int8_cfg, tasks, "cpu", to_dict(compose(["precision=bf16"]).precision))
    assert said.startswith("fidelity reference of tiny/bf16 in tiny-")
    assert reference_exists(int8_cfg, tasks, loaded.tokenizer) and len(fidelity_files(root)) == 1
    without_file = measure_fidelity(loaded, tasks, int8_cfg)
    assert with_file is not None and without_file is not None
    assert without_file.mean_kl == pytest.approx(with_file.mean_kl, rel=1e-6)
    assert without_file.top1_agreement == with_file.top1_agreement
