"""engine=scripted (selector/engines/scripted.py), the engine the tests of the search, the policy flow
and the faults run on: right answers at the accuracy its config sets, the same ones every time,
made-up next-token distributions the fidelity stage compares, and requests timed like a server's."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from selector.generation import GenerationRequest
from selector.engines.scripted import ScriptedEngine, ScriptedEngineConfig
from selector.engines.spec import Batching, StartContext
from selector.measure.fidelity import compare_all, probe_token_ids, reference_from
from selector.origin import Origin
from selector.paths import DEFAULT_EVALSET
from selector.tasks import evaluate_task, load_evalset
from tests.factories import selector_config

TASKS = ["sentiment", "arithmetic"]  # multiple choice (log-likelihoods) and generate


@pytest.fixture(scope="module")
def tasks() -> list:  # type: ignore[type-arg]
    return load_evalset(DEFAULT_EVALSET, TASKS)


def started(tmp_path: Path, tasks: list, precision: str = "bf16", model: str = "tiny",  # type: ignore[type-arg]
            **config: object):  # type: ignore[no-untyped-def]
    engine_config = ScriptedEngineConfig(**config)  # type: ignore[arg-type]
    cfg = selector_config(tmp_path, model, precision, engine=engine_config)
    return ScriptedEngine(engine_config).start(StartContext(cfg, "cpu", tmp_path, tasks)), cfg


def scores(running, cfg, tasks) -> dict[str, dict[str, float]]:  # type: ignore[no-untyped-def, type-arg]
    """Per task, each item's score through the product's own evaluation."""
    return {t.name: {s.id: s.score for s in evaluate_task(running, t, cfg.model.name, cfg.model.prompt_style)[1]}
            for t in tasks}


def test_accuracy_one_answers_every_item_right_and_zero_none(tmp_path: Path,
                                                           tasks: list) -> None:  # type: ignore[type-arg]
    running, cfg = started(tmp_path, tasks, accuracy={"bf16": {"sentiment": 1.0, "arithmetic": 0.0}})
    got, sizes = scores(running, cfg, tasks), {t.name: len(t.items) for t in tasks}
    assert set(got["sentiment"].values()) == {1.0} and len(got["sentiment"]) == sizes["sentiment"]
    assert set(got["arithmetic"].values()) == {0.0} and len(got["arithmetic"]) == sizes["arithmetic"]


def test_the_most_specific_entry_names_the_variants_probability(tmp_path: Path,
                                                               tasks: list) -> None:  # type: ignore[type-arg]
    accuracy = {"tiny/int8": {"sentiment": 0.1}, "int8": {"sentiment": 0.2, "arithmetic": 0.3},
                "tiny": {"sentiment": 0.4, "arithmetic": 0.5, "code": 0.6}}
    int8, _ = started(tmp_path, tasks, "int8", accuracy=accuracy, default_accuracy=0.9)
    assert [int8.probability(t) for t in ("sentiment", "arithmetic", "code", "extraction")] == [0.1, 0.3, 0.6, 0.9]
    other, _ = started(tmp_path, tasks, "int8", model="other", accuracy=accuracy, default_accuracy=0.9)
    assert [other.probability(t) for t in ("sentiment", "arithmetic", "code")] == [0.2, 0.3, 0.9]


def test_the_right_items_are_a_fixed_draw_at_the_set_rate(tmp_path: Path) -> None:
    every = load_evalset(DEFAULT_EVALSET, ["sentiment"])
    n = len(every[0].items)
    a, cfg = started(tmp_path, every, accuracy={"bf16": {"sentiment": 0.5}})
    b, _ = started(tmp_path, every, accuracy={"bf16": {"sentiment": 0.5}})
    reseeded, _ = started(tmp_path, every, accuracy={"bf16": {"sentiment": 0.5}}, seed=1)
    first, again, other = (scores(r, cfg, every)["sentiment"] for r in (a, b, reseeded))
    assert first == again  # the same engine config answers the same items right
    assert first != other  # another seed draws other items
    # Binomial(n, 0.5): within 4 standard deviations of n/2 (a chance below 1e-4 of failing were it random)
    assert abs(sum(first.values()) - n / 2) <= 4 * (n / 4) ** 0.5, (sum(first.values()), n)


def test_a_probability_outside_zero_and_one_is_a_config_error(tmp_path: Path) -> None:
    from selector.errors import ConfigError

    engine = ScriptedEngine(ScriptedEngineConfig(accuracy={"bf16": {"sentiment": 1.5}}))
    with pytest.raises(ConfigError, match="engine.accuracy.bf16.sentiment"):
        engine.check(selector_config(tmp_path), Origin(given=frozenset({"engine.accuracy"})))


def test_fidelity_the_baseline_is_its_own_reference_and_siblings_drift_with_logit_noise(  # type: ignore[type-arg]
        tmp_path: Path, tasks: list) -> None:
    baseline, cfg = started(tmp_path, tasks, "bf16")
    probes = probe_token_ids(baseline, tasks, cfg)
    assert probes and all(0 <= i < 256 for ids in probes for i in ids)
    assert probes == probe_token_ids(started(tmp_path, tasks, "int8")[0], tasks, cfg)  # the same prompts, the same ids
    reference = reference_from(t.logp for t in baseline.token_logprobs(probes, 32))

    kl, agree = compare_all(reference, baseline.token_logprobs(probes, 32))
    assert float(kl.max()) < 1e-5 and bool(agree.all())
    mean_kl = {}
    for noise in (0.1, 1.0):
        int8, _ = started(tmp_path, tasks, "int8", logit_noise=noise)
        kl, agree = compare_all(reference, int8.token_logprobs(probes, 32))
        mean_kl[noise] = float(kl.mean())
        assert kl.numel() == reference.ids.shape[0]
    assert 0 < mean_kl[0.1] < mean_kl[1.0]


def test_timed_requests_wait_for_a_free_slot(tmp_path: Path, tasks: list) -> None:  # type: ignore[type-arg]
    running, _ = started(tmp_path, tasks, slots=1, ttft_ms=20.0, ms_per_token=5.0)
    request = GenerationRequest(prompt="Say yes", max_new_tokens=4)

    async def two_at_once():  # type: ignore[no-untyped-def]
        async with running.session(Batching()) as probe:
            return await asyncio.gather(probe.send(request), probe.send(request))

    first, second = sorted(asyncio.run(two_at_once()), key=lambda t: t.picked)
    for trace in (first, second):
        assert trace.output_tokens == 4 and len(trace.token_times) == 4
        assert trace.token_times[0] - trace.picked >= 0.02  # the first token after ttft_ms
    assert second.picked >= first.end  # one slot: the second waited for the first to finish
