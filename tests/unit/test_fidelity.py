"""Fidelity maths and bookkeeping: bucketed KL, top-1 agreement, probe selection, the probe file."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from selector.config import ModelConfig, SelectorConfig
from benchmarks.fidelity_topk import MIXES, SHIFTS, merged_top, mixed, shifted, synthetic_logits
from selector.engines.spec import TopLogprobs
from selector.measure.fidelity import (
    Reference,
    compare_all,
    compare_full,
    compare_top,
    corpus_probes,
    load_reference,
    probe_prompts,
    reference_path,
    save_reference,
    shares_none,
)
from selector.paths import DEFAULT_EVALSET
from tests.factories import selector_config

REPO = Path(__file__).resolve().parents[2]


def reference_of(logp: torch.Tensor, k: int) -> Reference:
    top = logp.topk(k, dim=-1)
    rest = logp.scatter(-1, top.indices, float("-inf")).logsumexp(-1)
    return Reference(top.indices, top.values, rest)


def full_kl(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    return (logp.exp() * (logp - logq)).sum(-1)


def random_logp(rows: int, vocab: int, seed: int, scale: float = 3.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(torch.randn(rows, vocab, generator=g, dtype=torch.float64) * scale, dim=-1)


def test_identical_distributions_have_zero_kl_and_full_agreement() -> None:
    logp = random_logp(5, 50, 0)
    kl, agree = compare_full(reference_of(logp, 8), logp)
    assert torch.allclose(kl, torch.zeros(5, dtype=kl.dtype), atol=1e-12)
    assert agree.all()


def test_bucketed_kl_is_exact_when_top_k_covers_the_vocabulary() -> None:
    p, q = random_logp(6, 20, 1), random_logp(6, 20, 2)
    kl, _ = compare_full(reference_of(p, 20), q)
    assert torch.allclose(kl, full_kl(p, q), rtol=1e-9)


def test_bucketed_kl_is_a_lower_bound_that_tightens_with_k() -> None:
    p, q = random_logp(8, 200, 3), random_logp(8, 200, 4)
    full = full_kl(p, q)
    previous = torch.zeros(8, dtype=torch.float64)
    for k in (1, 4, 16, 64, 199):
        kl, _ = compare_full(reference_of(p, k), q)
        assert (kl <= full + 1e-9).all()
        assert (kl >= previous - 1e-9).all()  # finer buckets never lose information
        previous = kl
    assert torch.allclose(previous, full, rtol=1e-6)


def test_kl_matches_a_hand_computed_case() -> None:
    p = torch.log(torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64))
    q = torch.log(torch.tensor([[0.3, 0.5, 0.2]], dtype=torch.float64))
    # k=1: buckets {token 0} and {tokens 1, 2}: p = (0.5, 0.5), q = (0.3, 0.7)
    expected = 0.5 * math.log(0.5 / 0.3) + 0.5 * math.log(0.5 / 0.7)
    kl, agree = compare_full(reference_of(p, 1), q)
    assert kl.item() == pytest.approx(expected, rel=1e-12)
    assert not agree.item()  # the variant prefers token 1
    q2 = torch.log(torch.tensor([[0.6, 0.2, 0.2]], dtype=torch.float64))
    assert compare_full(reference_of(p, 1), q2)[1].item()


def test_a_tie_at_the_top_is_agreement_whichever_token_argmax_names() -> None:
    """bf16 logits tie often: an identical model must agree everywhere, whatever argmax and topk pick."""
    logp = torch.log_softmax(torch.tensor([[2.0, 2.0, 0.0], [0.0, 3.0, 3.0]]), -1)
    ref = reference_of(logp, 2)
    assert compare_full(ref, logp)[1].all()
    flipped = torch.stack([logp[:, [1, 0, 2]][0], logp[:, [0, 2, 1]][1]])  # the tied tokens' order swapped
    assert compare_full(ref, flipped)[1].all()
    ids = torch.tensor([[1, 0], [2, 1]])  # a server listing the other tied token first
    assert compare_top(ref, ids, logp.gather(-1, ids))[1].all()


def test_agreement_counts_positions_where_the_top_token_matches() -> None:
    p = torch.log_softmax(torch.tensor([[5.0, 0, 0], [0, 5.0, 0], [0, 0, 5.0], [5.0, 0, 0]]), -1)
    q = torch.log_softmax(torch.tensor([[5.0, 0, 0], [5.0, 0, 0], [0, 0, 5.0], [0, 5.0, 0]]), -1)
    _, agree = compare_full(reference_of(p, 2), q)
    assert agree.tolist() == [True, False, True, False]


def test_a_baseline_with_no_mass_outside_top_k_gives_no_nan() -> None:
    p = torch.log(torch.tensor([[0.7, 0.3, 0.0, 0.0]], dtype=torch.float64))
    q = torch.log_softmax(torch.zeros(1, 4, dtype=torch.float64), -1)  # uniform 0.25
    kl, _ = compare_full(reference_of(p, 2), q)
    # buckets: p = (0.7, 0.3, 0), q = (0.25, 0.25, 0.5); the empty rest bucket adds nothing
    assert kl.item() == pytest.approx(0.7 * math.log(0.7 / 0.25) + 0.3 * math.log(0.3 / 0.25), rel=1e-12)


def served_top(logq: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """What a server returns per position: its k most likely tokens, most likely first."""
    top = logq.topk(k, dim=-1)
    return top.indices, top.values


def test_a_servers_top_k_gives_the_whole_figure_when_it_covers_the_vocabulary() -> None:
    p, q = random_logp(6, 40, 11), random_logp(6, 40, 12)
    ref = reference_of(p, 16)
    kl, agree = compare_top(ref, *served_top(q, 40))
    want_kl, want_agree = compare_full(ref, q)
    assert torch.allclose(kl, want_kl, rtol=1e-9) and torch.equal(agree, want_agree)


def test_a_servers_top_k_is_a_lower_bound_that_tightens_with_k() -> None:
    """Fewer buckets (the baseline's top tokens the server also names): never above the whole-
    distribution figure, which is never above the full-vocabulary KL."""
    p, q = random_logp(8, 300, 13, scale=2.0), random_logp(8, 300, 14, scale=2.0)
    ref = reference_of(p, 64)
    whole, _ = compare_full(ref, q)
    previous = torch.zeros(8, dtype=torch.float64)
    for k in (1, 5, 20, 100, 300):
        kl, _ = compare_top(ref, *served_top(q, k))
        assert (kl <= whole + 1e-9).all() and (kl >= previous - 1e-9).all()
        previous = kl
    assert (whole <= full_kl(p, q) + 1e-9).all()


def test_a_servers_top_k_matches_a_hand_computed_case() -> None:
    p = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]], dtype=torch.float64))
    # The baseline's top 3 are tokens 0, 1, 2; the server names its top 2, tokens 1 (0.4) and 2 (0.3).
    # Buckets: {1}: p 0.3, q 0.4; {2}: p 0.15, q 0.3; the rest {0, 3}: p 0.55, q 0.3.
    expected = 0.3 * math.log(0.3 / 0.4) + 0.15 * math.log(0.15 / 0.3) + 0.55 * math.log(0.55 / 0.3)
    ids = torch.tensor([[1, 2, -1]])  # a position given fewer tokens is padded with -1 (no token)
    logq = torch.tensor([[math.log(0.4), math.log(0.3), float("-inf")]], dtype=torch.float64)
    kl, agree = compare_top(reference_of(p, 3), ids, logq)
    assert kl.item() == pytest.approx(expected, rel=1e-12)
    assert not agree.item()  # the server's most likely token is 1, the baseline's 0


def test_a_servers_top_k_that_rounds_to_all_the_mass_stays_finite_and_a_lower_bound() -> None:
    """A peaked distribution: the variant's top tokens hold all but 1e-9 of its mass, and float32
    log-probabilities sum to a hair over 1. The rest is taken as at least REST_FLOOR, never empty."""
    p = torch.log(torch.tensor([[0.99, 0.009, 0.0009, 0.0001]], dtype=torch.float64))
    q = torch.log(torch.tensor([[0.999999999, 5e-10, 3e-10, 2e-10]], dtype=torch.float64))
    ids = torch.tensor([[0]])
    logq = torch.tensor([[1e-7]], dtype=torch.float32)  # log of 1.0000001: rounding above 1
    kl, agree = compare_top(reference_of(p.float(), 2), ids, logq)
    assert torch.isfinite(kl).all() and agree.all()
    assert kl.item() <= full_kl(p, q).item()


SERVED_SLACK = 1e-4  # float32 log-probabilities: the figure's rounding, the only slack it is allowed


def served_sweep(steps: list[torch.Tensor], p: torch.Tensor, ref: Reference) -> tuple[list, list, list]:
    """Per step: full-vocabulary KL, the served top-20 figure, the figure before issue 50 (per position)."""
    full, served, before = [], [], []
    for logits in steps:
        q = torch.log_softmax(logits, -1)
        ids, logq = served_top(q.float(), 20)
        full.append(full_kl(p, q))
        served.append(compare_top(ref, ids, logq, k=20)[0].double())
        before.append(merged_top(ref, ids, logq))
    return full, served, before


def falls_while_full_rises(full: list[torch.Tensor], figure: list[torch.Tensor]) -> float:
    """The most the mean figure falls from one step to another whose mean full KL is higher."""
    f, x = [float(t.mean()) for t in full], [float(t.mean()) for t in figure]
    return max((x[i] - x[j] for i in range(len(f)) for j in range(len(f)) if f[j] > f[i]), default=0.0)


def test_a_servers_top_20_sharing_no_token_with_the_baseline_does_not_read_zero() -> None:
    """Issue 50: the variant's top 20 share no token with the baseline's top 256 (the baseline's ranking
    moved 50 places down), its full KL is 5.2: the figure used to read exactly 0. Now each of the
    baseline's top tokens counts at most the variant's 20th probability: 3.65, still below the full KL."""
    base, _ = synthetic_logits(positions=24)
    p = torch.log_softmax(base, -1)
    ref = reference_of(p.float(), 256)
    q = torch.log_softmax(shifted(base, 50), -1)
    ids, logq = served_top(q.float(), 20)
    assert shares_none(ref, ids).all()
    kl, agree = compare_top(ref, ids, logq, k=20)
    full = full_kl(p, q)
    assert float(merged_top(ref, ids, logq).max()) < 1e-6  # what it read before: 0 but for float rounding
    assert (kl > 1.0).all() and (kl.double() <= full + SERVED_SLACK).all()
    assert 3.0 < float(kl.mean()) < float(full.mean())
    assert not agree.any()


def test_the_served_figure_never_falls_while_the_full_kl_rises_over_the_shift_and_mix_sweeps() -> None:
    """The variant moved away step by step (benchmarks/fidelity_topk.py --synthetic, docs/precisions.md):
    its ranking s places down, or its logits mixed towards another model's. Per position the figure
    stays below the in-process figure and the full KL; its mean never falls between two steps where the
    full KL rises (beyond float rounding). The figure before issue 50 fell to 0 on both sweeps."""
    for seed in (0, 1):
        base, other = synthetic_logits(positions=24, seed=seed)
        p = torch.log_softmax(base, -1)
        ref = reference_of(p.float(), 256)
        for steps in ([shifted(base, s) for s in SHIFTS], [mixed(base, other, a) for a in MIXES]):
            full, served, before = served_sweep(steps, p, ref)
            for logits, f, x in zip(steps, full, served):
                inprocess, _ = compare_full(ref, torch.log_softmax(logits, -1).float())
                assert (x <= inprocess.double() + SERVED_SLACK).all() and (x <= f + SERVED_SLACK).all()
            assert falls_while_full_rises(full, served) <= SERVED_SLACK
            assert falls_while_full_rises(full, before) > 0.5 * max(float(t.mean()) for t in before)
            assert min(float(t.mean()) for t in served[1:]) > 0.02  # nothing but the baseline itself reads 0


def test_the_served_figure_lies_between_the_merged_one_and_the_whole_distributions() -> None:
    """Merging the unnamed top tokens into the rest (the figure before) <= the served figure <= the
    in-process figure <= the full KL, position by position, whatever the shapes and k."""
    for seed, scale in ((21, 1.0), (22, 3.0), (23, 6.0)):
        p, q = random_logp(16, 400, seed, scale), random_logp(16, 400, seed + 100, scale)
        q = torch.where(torch.arange(16).unsqueeze(-1) % 2 == 0, q, 0.7 * p + 0.3 * q).log_softmax(-1)
        ref = reference_of(p, 64)
        whole, _ = compare_full(ref, q)
        for k in (1, 5, 20, 100):
            ids, logq = served_top(q, k)
            kl, _ = compare_top(ref, ids, logq, k=k)
            assert (merged_top(ref, ids, logq) <= kl + 1e-9).all()
            assert (kl <= whole + 1e-9).all() and (whole <= full_kl(p, q) + 1e-9).all()


def test_k_caps_unnamed_tokens_by_the_servers_kth_not_by_an_extra_token() -> None:
    """vLLM adds the prompt's own token to its top max_logprobs when that token is not among them; that
    extra token is not a cap on the unnamed ones. A position given fewer than k tokens has no cap."""
    p = torch.tensor([[0.6, 0.2, 0.1, 0.05, 0.03, 0.02]], dtype=torch.float64)
    q = torch.tensor([[0.1, 0.35, 0.3, 0.05, 0.12, 0.08]], dtype=torch.float64)
    full = full_kl(p.log(), q.log()).item()
    ref = reference_of(p.log(), 2)
    ids = torch.tensor([[1, 2, 3]])  # the top 2, then token 3 (0.05), the prompt's: token 0 (0.1) is more likely
    capped_by_2 = compare_top(ref, ids, q.log().gather(-1, ids), k=2)[0].item()
    assert 0 < capped_by_2 <= full
    assert compare_top(ref, ids, q.log().gather(-1, ids))[0].item() > full  # taking 0.05 as the cap: wrong
    short = torch.tensor([[1, -1]])  # the server gave one token where it was asked for 2
    logq = torch.tensor([[math.log(0.35), float("-inf")]], dtype=torch.float64)
    assert 0 < compare_top(ref, short, logq, k=2)[0].item() <= full


def test_compare_all_passes_k_and_says_where_the_server_named_none_of_the_baselines_tokens() -> None:
    base, _ = synthetic_logits(positions=8, vocab=2048)
    p = torch.log_softmax(base, -1)
    ref = reference_of(p.float(), 256)
    near, far = torch.log_softmax(shifted(base, 1), -1).float(), torch.log_softmax(shifted(base, 50), -1).float()
    chunks = [TopLogprobs(*reversed(served_top(q, 20))) for q in (near[:4], far[4:])]
    disjoint: list[torch.Tensor] = []
    kl, _ = compare_all(ref, chunks, 20, disjoint)
    assert torch.cat(disjoint).tolist() == [False] * 4 + [True] * 4
    want = torch.cat([compare_top(reference_of(p[i:i + 4].float(), 256), *served_top(q, 20), k=20)[0]
                      for i, q in ((0, near[:4]), (4, far[4:]))])
    assert torch.allclose(kl, want)


def test_reference_file_round_trip(tmp_path: Path) -> None:
    ref = reference_of(random_logp(7, 30, 5).float(), 10)
    path = tmp_path / "fidelity" / "m-abc.safetensors"
    save_reference(path, Reference(ref.ids.to(torch.int64), ref.logp, ref.rest))
    back = load_reference(path)
    assert back is not None
    assert torch.equal(back.ids, ref.ids) and torch.equal(back.logp, ref.logp) and torch.equal(back.rest, ref.rest)
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    assert load_reference(tmp_path / "missing.safetensors") is None


def cfg_for(tmp_path: Path, style: str = "chat", baseline: str = "bf16") -> SelectorConfig:
    return selector_config(tmp_path, ModelConfig(name="tiny", prompt_style=style), baseline_precision=baseline)


def test_reference_path_depends_on_model_baseline_and_probe_tokens(tmp_path: Path) -> None:
    probes = [[1, 2, 3], [4, 5]]
    base = reference_path(cfg_for(tmp_path), probes)
    assert base.parent == tmp_path / "fidelity" and base.name.startswith("tiny-") and base.suffix == ".safetensors"
    assert reference_path(cfg_for(tmp_path), [[1, 2, 3], [4, 5]]) == base
    assert reference_path(cfg_for(tmp_path), [[1, 2, 3], [4, 6]]) != base
    assert reference_path(cfg_for(tmp_path), [[1, 2], [3, 4, 5]]) != base  # boundaries count
    assert reference_path(cfg_for(tmp_path, baseline="fp32"), probes) != base


def test_probe_prompts_take_the_first_items_round_robin_over_tasks(tmp_path: Path) -> None:
    from selector.tasks import build_prompt, load_evalset

    tasks = load_evalset(DEFAULT_EVALSET)
    prompts = probe_prompts(tasks, cfg_for(tmp_path, "plain"), k=6)
    assert len(prompts) == 6
    first_two_rows = [build_prompt(t, t.items[row], "plain") for row in (0, 1) for t in tasks][:6]
    assert prompts == first_two_rows
    assert len({str(p) for p in prompts}) == 6
    chat = probe_prompts(tasks, cfg_for(tmp_path, "chat"), k=3)
    assert all(isinstance(p, list) and p[-1]["role"] == "user" for p in chat)


def test_probe_prompts_stop_when_the_eval_set_runs_out(tmp_path: Path) -> None:
    from selector.tasks import load_evalset

    tasks = load_evalset(DEFAULT_EVALSET, ["sentiment"], limit=5)
    assert len(probe_prompts(tasks, cfg_for(tmp_path), k=32)) == 5


def test_corpus_probes_are_spread_over_the_corpus() -> None:
    probes = corpus_probes(4)
    assert len(probes) == 4 and len(set(probes)) == 4


def test_mlflow_gets_how_many_positions_a_server_named_none_of_the_baselines_tokens() -> None:
    from selector.records import FidelityResult
    from selector.trackers.naming import record_metrics
    from tests.factories import run_record

    record = run_record("m", "int8")
    record.fidelity = FidelityResult(baseline="m/bf16", mean_kl=3.65, top1_agreement=0.0, positions=1152,
                                     method="top-20", disjoint=300)
    metrics = record_metrics(record)
    assert metrics["fidelity/disjoint_positions"] == 300.0 and metrics["fidelity/mean_kl"] == 3.65
