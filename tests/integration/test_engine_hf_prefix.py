"""The in-process engine's shared-prefix KV cache changes speed, not answers.

A real (tiny, randomly initialised) Llama is run on prompts that share a long few-shot prefix, once
with prefix sharing off and once on: greedy generations must be identical and log-likelihoods equal
to float rounding, including prompts of different lengths (left padding after the shared prefix).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from selector.generation import GenerationRequest, LoglikelihoodRequest
from selector.engines.inprocess.evaluator import TransformersEvaluator, shared_prefix_length

pytestmark = pytest.mark.fast  # make test-fast

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

PREFIX = [
    {"role": "system", "content": "Answer with one word. The food was great and the staff were lovely."},
    {"role": "user", "content": "Terrible service, cold soup, never again."},
    {"role": "assistant", "content": "negative"},
]
QUESTIONS = ["What is 12 plus 30?", "Bob bought 3 apples and 4 pears. How many fruits in all, Bob?",
             "Order 4521", "Alice lives in Paris and works at the museum on 2021-03-14. Where?"]


def engines(model_dir: Path) -> tuple[TransformersEvaluator, TransformersEvaluator]:
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    return (TransformersEvaluator(model, tok, batch_size=3, min_shared_prefix=0),
            TransformersEvaluator(model, tok, batch_size=3, min_shared_prefix=4))


def prompts() -> list:
    return [PREFIX + [{"role": "user", "content": q}] for q in QUESTIONS]


def test_shared_prefix_length_leaves_each_row_a_token() -> None:
    assert shared_prefix_length([[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 9]]) == 2
    assert shared_prefix_length([[1, 2, 3], [1, 2, 3]]) == 2  # identical prompts still run their last token
    assert shared_prefix_length([]) == 0


def test_generation_is_identical_with_and_without_the_shared_prefix(tiny_model_dir: Path) -> None:
    plain, shared = engines(tiny_model_dir)
    requests = [GenerationRequest(prompt=p, max_new_tokens=12) for p in prompts()]
    assert shared._shared_prefix([shared.encode(shared.render(r.prompt)) for r in requests], extra=12) is not None
    a, b = plain.generate(requests), shared.generate(requests)
    assert [g.text for g in a] == [g.text for g in b]
    assert [g.output_tokens for g in a] == [g.output_tokens for g in b]
    assert [g.prompt_tokens for g in a] == [g.prompt_tokens for g in b]


def test_loglikelihood_matches_with_and_without_the_shared_prefix(tiny_model_dir: Path) -> None:
    plain, shared = engines(tiny_model_dir)
    requests = [LoglikelihoodRequest(context=p, continuation=c) for p in prompts() for c in (" positive", " negative")]
    a, b = plain.loglikelihood(requests), shared.loglikelihood(requests)
    assert [x.tokens for x in a] == [x.tokens for x in b]
    assert [x.is_greedy for x in a] == [x.is_greedy for x in b]
    for x, y in zip(a, b):
        assert x.logprob == pytest.approx(y.logprob, abs=1e-4)
