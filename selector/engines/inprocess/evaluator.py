"""In-process transformers evaluator (the in-process engine evaluates through it): batched greedy
generation and log-likelihood scoring.

Generation sorts requests by prompt length (longest first, so an out-of-memory shows up on the first
batch), left-pads, stops each sequence at its own stop strings or end-of-turn token, and decodes only
the new tokens. Log-likelihood runs each distinct context once and scores all its continuations on a
copy of its KV cache (shared-prefix scoring), which is what makes multiple choice cheap.

The prompts of one call usually start alike: a task's few-shot examples and system prompt are ~80%
of every prompt in the default eval set. The token prefix all prompts of a call share is run
through the model once; every batch starts from a copy of its KV cache and runs only its own tokens
(left-padded between the shared prefix and them, positions counted from the attention mask, so each
row sees the same tokens at the same positions as it would alone). Only float rounding differs
(matrix shapes change), as it does between batch compositions.
Everything is greedy and the batch order is a pure function of the requests: same variant, same
predictions.

With `compile` on (engine.compile; auto turns it on for CUDA), batches generate through the fast
path (fast.py: a static KV cache and a compiled decode step). A batch that starts from the shared
prefix's cache keeps the dynamic cache: that cache is a copy grown per batch, which a fixed-shape
compiled step cannot take, and the prefix already spares most of such a batch's prompt. So with
prompts that share a long few-shot prefix, evaluation mostly runs the plain path, and latency and
throughput measurement (one prompt, no prefix) runs the fast one.
"""

from __future__ import annotations

import copy
import inspect
from collections import defaultdict
from typing import Any, Callable, Sequence

import torch

from selector.generation import (
    Generation,
    GenerationRequest,
    Loglikelihood,
    LoglikelihoodRequest,
    Progress,
    Prompt,
    encode_prompt,
    render_prompt,
)
from selector.engines.inprocess.fast import FastPath
from selector.engines.inprocess.greedy import greedy_generate


class StopOnStrings:
    """Per-sequence stopping criterion: a row is done once its completion contains a stop string."""

    def __init__(self, tokenizer: Any, prompt_len: int, stops: Sequence[str]) -> None:
        self.tokenizer, self.prompt_len, self.stops = tokenizer, prompt_len, list(stops)
        self.longest = max((len(s) for s in self.stops), default=0)

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        if not self.stops:
            return done
        # Decoding the last few tokens is enough: a stop string is at most `longest` characters.
        tail = input_ids[:, max(self.prompt_len, input_ids.shape[1] - self.longest - 2) :]
        for row, text in enumerate(self.tokenizer.batch_decode(tail, skip_special_tokens=True)):
            done[row] = any(s in text for s in self.stops)
        return done


class SharedPrefix:
    """The KV cache of a token prefix that every prompt of a call starts with, computed once."""

    def __init__(self, tokens: list[int], cache: Any, device: Any) -> None:
        self.tokens, self.cache = tokens, cache
        self.ids = torch.tensor([tokens], dtype=torch.long, device=device)

    def __len__(self) -> int:
        return len(self.tokens)

    def cache_for(self, rows: int) -> Any:
        """A fresh copy for a batch of `rows` (the model appends to the cache it is given)."""
        cache = copy.deepcopy(self.cache)
        cache.batch_repeat_interleave(rows)
        return cache


def shared_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """Tokens all sequences start with, leaving each at least one token of its own (the model must
    run something per row to give that row's next-token logits)."""
    if not sequences:
        return 0
    first, limit = sequences[0], min(len(s) for s in sequences) - 1
    n = 0
    while n < limit and all(s[n] == first[n] for s in sequences):
        n += 1
    return max(n, 0)


class TransformersEvaluator:
    name = "hf"

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 8, max_batch_tokens: int = 16384,
                 min_shared_prefix: int = 16, compile: Any = "off"):
        self.model, self.tok = model, tokenizer
        self.fast = FastPath(model, compile)  # engine.compile: auto | on | off
        self.batch_size, self.max_batch_tokens = batch_size, max_batch_tokens
        # Below this many shared tokens a separate prefix pass is not worth its call; 0 turns sharing off.
        self.min_shared_prefix = min_shared_prefix
        self.device = next(model.parameters()).device
        eos = model.generation_config.eos_token_id
        self.eos_ids = [eos] if isinstance(eos, int) else list(eos or [tokenizer.eos_token_id])
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0]
        self._keeps_logits = "logits_to_keep" in inspect.signature(model.forward).parameters

    # ---- prompts -------------------------------------------------------------------------
    def render(self, prompt: Prompt) -> str:
        return render_prompt(self.tok, prompt)

    def encode(self, prompt: Prompt) -> list[int]:
        return encode_prompt(self.tok, prompt)

    # ---- generation ----------------------------------------------------------------------
    def generate(self, requests: list[GenerationRequest], progress: Progress | None = None) -> list[Generation]:
        encoded = [self.encode(r.prompt) for r in requests]
        results: list[Generation | None] = [None] * len(requests)
        groups: dict[tuple, list[int]] = defaultdict(list)
        for i, r in enumerate(requests):
            groups[(r.max_new_tokens, tuple(r.stop))].append(i)
        for (max_new, stops), idx in groups.items():
            prefix = self._shared_prefix([encoded[i] for i in idx], extra=max_new)
            for batch in self._batches(idx, encoded, extra=max_new):
                prompts = [encoded[i] for i in batch]
                for i, gen in zip(batch, self._generate_batch(prompts, max_new, list(stops), prefix)):
                    results[i] = gen
                if progress:
                    progress(len(batch))
        return results  # type: ignore[return-value]

    @torch.inference_mode()
    def _generate_batch(self, prompts: list[list[int]], max_new: int, stops: list[str],
                        prefix: SharedPrefix | None = None) -> list[Generation]:
        ids, mask, past = self._inputs(prompts, prefix)
        if past is None and self.fast.active:  # the fast path owns its (static) cache
            out = self.fast.generate(
                input_ids=ids, attention_mask=mask, max_new_tokens=max_new, do_sample=False, num_beams=1,
                eos_token_id=self.eos_ids, pad_token_id=self.pad_id,
                stopping_criteria=[StopOnStrings(self.tok, ids.shape[1], stops)] if stops else None,
            )
            new_tokens = out[:, ids.shape[1] :].tolist()
        else:  # finished rows leave the batch (engines/inprocess/greedy.py)
            new_tokens = greedy_generate(self.model, ids, mask, max_new, self.eos_ids, self._stop_check(stops), past,
                                         self._keeps_logits)
        gens = []
        for row, prompt in zip(new_tokens, prompts):
            row = _until_eos(row, self.eos_ids, self.pad_id)
            text = self.tok.decode(row, skip_special_tokens=True)
            cut = min((text.find(s) for s in stops if s in text), default=-1)
            if cut >= 0:
                text = text[:cut]
            gens.append(Generation(text=text, prompt_tokens=len(prompt), output_tokens=len(row)))
        return gens

    def _stop_check(self, stops: list[str]) -> Callable[[int, list[int]], bool] | None:
        """row, tokens -> has the row written a stop string (only the last few tokens can hold a new one)."""
        if not stops:
            return None
        tail = max(len(s) for s in stops) + 2

        def finished(row: int, tokens: list[int]) -> bool:
            text = self.tok.decode(tokens[-tail:], skip_special_tokens=True)
            return any(s in text for s in stops)

        return finished

    # ---- log-likelihood ------------------------------------------------------------------
    def loglikelihood(
        self, requests: list[LoglikelihoodRequest], progress: Progress | None = None
    ) -> list[Loglikelihood]:
        by_context: dict[str, list[int]] = defaultdict(list)
        rendered: dict[str, Prompt] = {}
        for i, r in enumerate(requests):
            key = self.render(r.context)
            by_context[key].append(i)
            rendered[key] = r.context
        contexts = list(by_context)
        ctx_ids = [self.encode(rendered[c]) for c in contexts]
        conts = {}
        for c in contexts:
            plain_ctx = self.tok(c, add_special_tokens=False)["input_ids"]  # once per context, not per choice
            for i in by_context[c]:
                conts[i] = self._continuation_ids(plain_ctx, c, requests[i].continuation)
        results: list[Loglikelihood | None] = [None] * len(requests)
        longest_cont = max((len(v) for v in conts.values()), default=1)
        prefix = self._shared_prefix(ctx_ids, extra=longest_cont)
        for batch in self._batches(list(range(len(contexts))), ctx_ids, extra=longest_cont):
            members = [by_context[contexts[n]] for n in batch]
            scored = self._score_batch([ctx_ids[n] for n in batch], [[conts[i] for i in m] for m in members], prefix)
            for m, values in zip(members, scored):
                for i, v in zip(m, values):
                    results[i] = v
            if progress:
                progress(sum(len(m) for m in members))
        return results  # type: ignore[return-value]

    def _continuation_ids(self, plain_ctx: list[int], context: str, continuation: str) -> list[int]:
        # Tokenize context+continuation together so merges across the boundary match what the
        # model would see; fall back to separate encoding when the context's tokens change.
        # plain_ctx: the context's tokens without special tokens.
        whole = self.tok(context + continuation, add_special_tokens=False)["input_ids"]
        if whole[: len(plain_ctx)] == plain_ctx and len(whole) > len(plain_ctx):
            return whole[len(plain_ctx) :]
        return self.tok(continuation, add_special_tokens=False)["input_ids"]

    @torch.inference_mode()
    def _score_batch(self, contexts: list[list[int]], continuations: list[list[list[int]]],
                     prefix: SharedPrefix | None = None) -> list[list[Loglikelihood]]:
        ids, mask, past = self._inputs(contexts, prefix)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        run = ids.shape[1] - (len(prefix) if prefix else 0)  # the tokens this call runs (after the shared prefix)
        keep = {"logits_to_keep": 1} if self._keeps_logits else {}  # only the next-token logits are read
        out = self.model(input_ids=ids[:, -run:], attention_mask=mask, position_ids=pos[:, -run:],
                         past_key_values=past, use_cache=True, **keep)
        last_logp = torch.log_softmax(out.logits[:, -1, :].float(), dim=-1)
        # One row per continuation, each on a copy of its context's cache.
        owner = [n for n, conts in enumerate(continuations) for _ in conts]
        flat = [c for conts in continuations for c in conts]
        cache = out.past_key_values
        index = torch.tensor(owner, device=self.device)
        cache.batch_select_indices(index)  # duplicates each context's row for its continuations
        width = max(len(c) for c in flat) - 1
        scores: list[Loglikelihood] = []
        follow_logp = None
        if width > 0:
            cont_ids = torch.full((len(flat), width), self.pad_id, dtype=torch.long, device=self.device)
            cont_mask = torch.zeros((len(flat), width), dtype=mask.dtype, device=self.device)
            for r, c in enumerate(flat):
                cont_ids[r, : len(c) - 1] = torch.tensor(c[:-1])
                cont_mask[r, : len(c) - 1] = 1
            full_mask = torch.cat([mask[index], cont_mask], dim=1)
            cont_pos = pos[index, -1:] + 1 + torch.arange(width, device=self.device)
            follow = self.model(
                input_ids=cont_ids, attention_mask=full_mask, position_ids=cont_pos, past_key_values=cache
            )
            follow_logp = torch.log_softmax(follow.logits.float(), dim=-1)
        for r, c in enumerate(flat):
            steps = [last_logp[owner[r]]]
            if len(c) > 1:
                assert follow_logp is not None  # width > 0: the tokens after each first one were run
                steps += [follow_logp[r, j] for j in range(len(c) - 1)]
            lp = sum(float(s[t]) for s, t in zip(steps, c))
            greedy = all(int(s.argmax()) == t for s, t in zip(steps, c))
            scores.append(Loglikelihood(logprob=lp, tokens=len(c), is_greedy=greedy))
        grouped, k = [], 0
        for conts in continuations:
            grouped.append(scores[k : k + len(conts)])
            k += len(conts)
        return grouped

    # ---- shared prefix -------------------------------------------------------------------
    @torch.inference_mode()
    def _shared_prefix(self, prompts: Sequence[Sequence[int]], extra: int) -> SharedPrefix | None:
        """The KV cache of the tokens all `prompts` start with, or None when not worth it or not safe."""
        if self.min_shared_prefix <= 0 or len(prompts) < 2:
            return None
        n = shared_prefix_length(prompts)
        if n < self.min_shared_prefix:
            return None
        # A sliding-window cache keeps only the last `window` tokens: sharing is exact only below it.
        window = getattr(self.model.config, "sliding_window", None)
        if window and max(len(p) for p in prompts) + extra >= window:
            return None
        tokens = list(prompts[0][:n])
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        keep = {"logits_to_keep": 1} if self._keeps_logits else {}
        out = self.model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True, **keep)
        cache = out.past_key_values
        if cache is None or not hasattr(cache, "batch_repeat_interleave"):
            return None
        return SharedPrefix(tokens, cache, self.device)

    def _inputs(self, prompts: list[list[int]], prefix: SharedPrefix | None) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """(input ids, attention mask, past cache or None) for a batch: with a shared prefix, the
        prefix tokens, then each row's own tokens left-padded; the cache holds the prefix."""
        if prefix is None:
            ids, mask = self._left_pad(prompts)
            return ids, mask, None
        n = len(prompts)
        own_ids, own_mask = self._left_pad([p[len(prefix):] for p in prompts])
        ids = torch.cat([prefix.ids.expand(n, -1), own_ids], dim=1)
        mask = torch.cat([torch.ones((n, len(prefix)), dtype=own_mask.dtype, device=self.device), own_mask], dim=1)
        return ids, mask, prefix.cache_for(n)

    # ---- batching helpers ----------------------------------------------------------------
    def _batches(self, idx: list[int], encoded: Sequence[Sequence[int]], extra: int) -> list[list[int]]:
        """Longest first; a batch holds at most batch_size rows and max_batch_tokens padded tokens."""
        order = sorted(idx, key=lambda i: (-len(encoded[i]), i))
        batches: list[list[int]] = []
        for i in order:
            if batches and len(batches[-1]) < self.batch_size and (
                (len(batches[-1]) + 1) * (len(encoded[batches[-1][0]]) + extra) <= self.max_batch_tokens
            ):
                batches[-1].append(i)
            else:
                batches.append([i])
        return batches

    def _left_pad(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for n, r in enumerate(rows):
            ids[n, width - len(r) :] = torch.tensor(r, dtype=torch.long)
            mask[n, width - len(r) :] = 1
        return ids.to(self.device), mask.to(self.device)


def _until_eos(row: list[int], eos_ids: list[int], pad_id: int) -> list[int]:
    for n, t in enumerate(row):
        if t in eos_ids:
            return row[:n]
    while row and row[-1] == pad_id:  # rows that finished early are padded to the batch's end
        row = row[:-1]
    return row

