"""The precisions on a real pretrained model (SmolLM2-135M-Instruct, offline from PyPI), with the
default calibration budget: each must stay close to the bf16 baseline in what matters, its
next-token choices on the eval set's own prompts and its accuracy on a task it can do (sentiment).

Slow: GPTQ and AWQ take ~2 min each on one core of a busy machine. The model and the quantized
artifacts go into the cache the suite shares (`$SELECTOR_CACHE`, else ~/.cache/selector): the model
is converted once for every test that sweeps it, and a warm cache keeps the artifacts between runs
(a clean machine, as in CI, quantizes them here). Skipped when the package index cannot be reached.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from scipy.stats import binomtest

from selector import models
from selector.config import CalibrationConfig, ModelConfig, SelectorConfig
from selector.engines.inprocess.engine import HfEngineConfig, InProcessRunning
from selector.measure.fidelity import measure_fidelity
from selector.precisions import get_backend
from selector.precisions.base import LoadContext, LoadedModel
from selector.tasks import evaluate_task, load_evalset
from selector.paths import DEFAULT_EVALSET
from tests.factories import selector_config, shipped_config
from tests.tiers import precision_case

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def smol(shared_model_cache: Path):  # type: ignore[no-untyped-def]
    model, cache = shipped_config("model", "smollm2-135m", ModelConfig), shared_model_cache
    ok, why = models.check_available(model, cache_dir=cache)
    if not ok:
        pytest.skip(f"smollm2-135m: {why}")
    evalset = DEFAULT_EVALSET
    return model, cache, load_evalset(evalset), load_evalset(evalset, ["sentiment"], limit=24)


def cfg_for(model: ModelConfig, cache: Path, name: str) -> SelectorConfig:
    return selector_config(cache, model, name, calibration=shipped_config("calibration", "default", CalibrationConfig))


def load_variant(cfg: SelectorConfig, tasks: list) -> LoadedModel:  # type: ignore[type-arg]
    from selector.precisions.calibration import calibration_texts

    resolved = models.resolve(cfg.model, Path(cfg.cache_dir), precision=cfg.precision.name, progress=False)
    ctx = LoadContext(model_cfg=cfg.model, device="cpu", cache_dir=Path(cfg.cache_dir), calibration=cfg.calibration,
                      calibration_texts=lambda: calibration_texts(cfg.calibration, tasks))
    return get_backend(cfg.precision.backend).load(resolved, cfg.precision, ctx)


def sentiment_scores(loaded: LoadedModel, cfg: SelectorConfig, sentiment: list) -> dict[str, float]:  # type: ignore[type-arg]
    """Each sentiment item's score (0 or 1), by item id."""
    from selector.engines.inprocess.evaluator import TransformersEvaluator

    _, samples = evaluate_task(TransformersEvaluator(loaded.model, loaded.tokenizer, 8), sentiment[0], cfg.model.name,
                               cfg.model.prompt_style)
    return {s.id: s.score for s in samples}


def mean(scores: dict[str, float]) -> float:
    return sum(scores.values()) / len(scores)


def significantly_worse_p(variant: dict[str, float], baseline: dict[str, float]) -> float:
    """One-sided exact McNemar p-value that the variant is worse than the baseline on the same items:
    a binomial test on the discordant pairs. A fixed accuracy margin on 24 items would be one or two
    items, which a different CPU's rounding can move (AVX-512/AMX vs AVX2 take different bf16 paths)."""
    lost = sum(1 for k in baseline if baseline[k] > variant[k])
    gained = sum(1 for k in baseline if variant[k] > baseline[k])
    return 1.0 if lost + gained == 0 else float(binomtest(lost, lost + gained, 0.5, alternative="greater").pvalue)


@pytest.fixture(scope="module")
def baseline_scores(smol) -> dict[str, float]:  # type: ignore[no-untyped-def]
    model, cache, tasks, sentiment = smol
    cfg = cfg_for(model, cache, "bf16")
    loaded = load_variant(cfg, tasks)
    assert measure_fidelity(InProcessRunning(HfEngineConfig(), loaded), tasks, cfg) is None  # writes the probe file
    scores = sentiment_scores(loaded, cfg, sentiment)
    assert mean(scores) >= 0.8  # measured 0.92 on the whole task: the model can do this
    return scores


@pytest.mark.parametrize(
    ("name", "min_agreement", "max_kl"),
    [
        precision_case("int8", 0.9, 0.1),
        precision_case("int8-torchao", 0.9, 0.1),
        precision_case("nf4", 0.7, 0.5),
        precision_case("gptq-int4", 0.7, 0.5),
        precision_case("awq-int4", 0.7, 0.5),
    ],
)
def test_smollm2_stays_close_to_bf16(  # type: ignore[no-untyped-def]
    name: str, min_agreement: float, max_kl: float, smol, baseline_scores: dict[str, float]
) -> None:
    model, cache, tasks, sentiment = smol
    cfg = cfg_for(model, cache, name)
    loaded = load_variant(cfg, tasks)
    fidelity = measure_fidelity(InProcessRunning(HfEngineConfig(), loaded), tasks, cfg)
    assert fidelity is not None and fidelity.baseline == "smollm2-135m/bf16"
    assert fidelity.positions > 1000  # 36 probes x 32 positions
    scores = sentiment_scores(loaded, cfg, sentiment)
    accuracy = mean(scores)
    print(f"\nsmollm2-135m {name}: top-1 {fidelity.top1_agreement:.3f} KL {fidelity.mean_kl:.3f} "
          f"sentiment {accuracy:.3f} (bf16 {mean(baseline_scores):.3f})")
    assert fidelity.top1_agreement >= min_agreement, fidelity
    assert 0 < fidelity.mean_kl < max_kl, fidelity
    if loaded.quant is not None and loaded.quant.artifact_dir:
        # SmolLM2's hidden size 576 is not a multiple of 128: the group size actually used is 64
        assert loaded.quant.params["group_size"] == 64 and loaded.quant.params["group_size_requested"] == 128
    if max_kl <= 0.1:  # 8-bit keeps what the model can do: no significant loss, item for item
        assert significantly_worse_p(scores, baseline_scores) >= 0.01, (scores, baseline_scores)
    else:
        # 4-bit on a 135M model can lose it (measured: nf4 and gptq-int4 fall to ~0.55 on these 24
        # items while top-1 agreement stays ~0.88): the sweep exists to show that. Only a broken
        # variant falls clearly below chance on this balanced task.
        assert accuracy >= 0.4
