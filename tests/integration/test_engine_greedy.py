"""Greedy decoding that drops finished rows gives the tokens transformers' generate gives, row by
row, for rows that stop at different steps (EOS, a stop string, the token limit), with and without
a shared-prefix cache; and it runs fewer row-steps."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from selector.engines.inprocess.greedy import greedy_generate
from selector.engines.inprocess.evaluator import TransformersEvaluator, StopOnStrings

pytestmark = pytest.mark.fast  # make test-fast: the in-process engine on the tiny model


@pytest.fixture(scope="module")
def tiny(tiny_model_dir: Path):  # type: ignore[no-untyped-def]
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.padding_side = "left"
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval(), tok


PROMPTS = ["The food was great and", "Bob bought 3 apples and 4 pears. How many", "def add(a, b):",
           "Order number 4521 was shipped to Berlin on", "What is 12 plus 30?"]


def _reference(model, tok, ids, mask, max_new, stops):  # type: ignore[no-untyped-def]
    eos = model.generation_config.eos_token_id
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, do_sample=False, num_beams=1,
                         eos_token_id=eos, pad_token_id=tok.pad_token_id,
                         stopping_criteria=[StopOnStrings(tok, ids.shape[1], stops)] if stops else None)
    return out[:, ids.shape[1]:].tolist()


@pytest.mark.parametrize("stops", [[], [" and", "\n"], ["e"]])
def test_same_tokens_as_generate_while_rows_finish_at_different_steps(tiny, stops) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    batch = tok(PROMPTS, return_tensors="pt", padding=True)
    engine = TransformersEvaluator(model, tok)
    ours = greedy_generate(model, batch["input_ids"], batch["attention_mask"], 24, engine.eos_ids,
                           engine._stop_check(stops))
    theirs = _reference(model, tok, batch["input_ids"], batch["attention_mask"], 24, stops)
    lengths = set()
    for mine, ref in zip(ours, theirs):
        assert ref[: len(mine)] == mine  # generate pads a finished row to the batch's end; we stop it
        assert all(t == tok.pad_token_id for t in ref[len(mine):])
        lengths.add(len(mine))
    if stops == ["e"]:
        assert len(lengths) > 1  # the rows did stop at different steps


def test_the_engine_gives_the_same_texts_with_a_shared_prefix(tiny) -> None:  # type: ignore[no-untyped-def]
    from selector.generation import GenerationRequest

    model, tok = tiny
    shared = "Answer the question in a few words. " * 4
    requests = [GenerationRequest(prompt=shared + p, max_new_tokens=20, stop=["."]) for p in PROMPTS]
    with_prefix = TransformersEvaluator(model, tok, batch_size=8).generate(requests)
    without = TransformersEvaluator(model, tok, batch_size=8, min_shared_prefix=0).generate(requests)
    one_by_one = TransformersEvaluator(model, tok, batch_size=1, min_shared_prefix=0).generate(requests)
    assert [g.text for g in with_prefix] == [g.text for g in without] == [g.text for g in one_by_one]


def test_finished_rows_stop_costing_steps(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    batch = tok(PROMPTS, return_tensors="pt", padding=True)
    rows_per_step = []

    def counting(**kwargs):  # type: ignore[no-untyped-def]
        rows_per_step.append(kwargs["input_ids"].shape[0])
        return model(**kwargs)

    engine = TransformersEvaluator(model, tok)
    out = greedy_generate(counting, batch["input_ids"], batch["attention_mask"], 24, engine.eos_ids,
                          engine._stop_check(["e"]))
    assert sum(rows_per_step[1:]) == sum(len(r) for r in out) - len(out)  # each decode step: only running rows
    assert rows_per_step[-1] < len(PROMPTS)
    assert torch.is_inference_mode_enabled() is False
