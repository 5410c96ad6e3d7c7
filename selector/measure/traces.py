"""Mooncake-style traces as the load set (measure.load.requests=<trace>.jsonl; docs/load-testing.md).

A trace row says how long a request was, not what it said:

    {"timestamp": 3052, "input_length": 2287, "output_length": 316, "hash_ids": [0, 42, 43, 44, 45]}

`timestamp`: ms since the trace began; `input_length` / `output_length`: tokens; `hash_ids`: one id
per block of BLOCK_TOKENS prompt tokens, in order; rows that share an id share that block's content
(the same system prompt, document or conversation so far), which is what a prefix cache reuses.

The prompts are synthesised with the served model's tokenizer: each block is BLOCK_TOKENS words
drawn (seeded by its hash id) from the vocabulary's whole-word tokens (" word" that encodes back to
the one token), so a prompt has input_length tokens and two prompts sharing hash ids share exactly
those tokens; blocks past the listed ids are the row's own. Prompts go out as plain text (no chat
template), each allowed output_length tokens.

Rows are checked when the file is read, before any model loads, each problem one line naming the
file, the line and the field (RequestFileError), including lengths beyond the model's context.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from selector.generation import ReplayRequest
from selector.measure.jsonl import RequestFileError, json_lines

BLOCK_TOKENS = 512  # Mooncake's block: each hash id stands for this many prompt tokens
FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
_WORD = re.compile(r" [A-Za-z]+")


@dataclass(frozen=True)
class TraceRow:
    line: int
    timestamp_ms: float | None
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def is_trace(path: Path) -> bool:
    """A JSONL file whose first row has `input_length` (and neither prompt nor messages)."""
    if path.suffix.lower() not in (".jsonl", ".json") or not path.is_file():
        return False
    with path.open(encoding="utf-8") as f:
        for text in f:
            if text.strip():
                try:
                    row = json.loads(text)
                except json.JSONDecodeError:
                    return False
                return isinstance(row, dict) and "input_length" in row and not {"prompt", "messages"} & set(row)
    return False


def read_trace(path: Path, shown: str) -> list[TraceRow]:
    """Every row, checked: known fields, whole lengths >= 1, hash ids that fit the input, and
    timestamps on every row or none, never going backwards."""
    rows = [_row(shown, line, row) for line, row in json_lines(path, shown)]
    if not rows:
        raise RequestFileError(shown, None, None, "no requests in this trace")
    _check_timestamps(shown, rows)
    return rows


def _row(shown: str, line: int, row: dict[str, Any]) -> TraceRow:
    def bad(field: str, problem: str) -> RequestFileError:
        return RequestFileError(shown, line, field, problem)

    unknown = sorted(set(row) - set(FIELDS))
    if unknown:
        raise bad(unknown[0], f"unknown field of a trace row; known: {', '.join(FIELDS)}")
    lengths = {}
    for field in ("input_length", "output_length"):
        value = row.get(field)
        if value is None:
            raise bad(field, "missing: a trace row needs input_length and output_length (tokens)")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < 1:
            raise bad(field, f"must be a whole number of tokens >= 1, got {value!r}")
        lengths[field] = int(value)
    stamp = row.get("timestamp")
    if stamp is not None and (isinstance(stamp, bool) or not isinstance(stamp, (int, float))
                              or not math.isfinite(stamp) or stamp < 0):
        raise bad("timestamp", f"must be 0 or more milliseconds, got {stamp!r}")
    ids = row.get("hash_ids", [])
    if not isinstance(ids, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in ids):
        raise bad("hash_ids", "must be a list of whole numbers (one per block of prompt tokens)")
    blocks = math.ceil(lengths["input_length"] / BLOCK_TOKENS)
    if len(ids) > blocks:
        raise bad("hash_ids", f"{len(ids)} blocks of {BLOCK_TOKENS} tokens is more than input_length "
                              f"{lengths['input_length']} holds ({blocks}): is the trace's block size {BLOCK_TOKENS}?")
    return TraceRow(line, None if stamp is None else float(stamp), lengths["input_length"], lengths["output_length"],
                    tuple(ids))


def _check_timestamps(shown: str, rows: list[TraceRow]) -> None:
    timed = [r for r in rows if r.timestamp_ms is not None]
    if timed and len(timed) != len(rows):
        first = next(r for r in rows if r.timestamp_ms is None)
        raise RequestFileError(shown, first.line, "timestamp", "missing: give a timestamp on every row or on none")
    for before, after in zip(timed, timed[1:]):
        if after.timestamp_ms < before.timestamp_ms:  # type: ignore[operator]
            raise RequestFileError(shown, after.line, "timestamp",
                                   f"goes backwards: {after.timestamp_ms:g} ms comes after {before.timestamp_ms:g} ms "
                                   f"(line {before.line}); sort the trace by timestamp")


def check_context(rows: Sequence[TraceRow], shown: str, context: int, model: str) -> None:
    """Every row's prompt and output within the model's context (its max_position_embeddings, or
    engine.vllm.max_model_len when set)."""
    for r in rows:
        if r.input_length + r.output_length > context:
            field = "input_length" if r.input_length >= context else "output_length"
            raise RequestFileError(shown, r.line, field,
                                   f"input_length {r.input_length} + output_length {r.output_length} tokens exceeds "
                                   f"{model}'s context of {context} tokens")


def word_tokens(tokenizer: Any) -> tuple[list[int], list[str]]:
    """The vocabulary's whole-word tokens: ids whose text is a space and letters and which encode
    back to that one id. Concatenated, such words tokenize to exactly those ids."""
    ids, texts = [], []
    for i in range(len(tokenizer)):
        text = tokenizer.decode([i])
        if _WORD.fullmatch(text) and tokenizer.encode(text, add_special_tokens=False) == [i]:
            ids.append(i)
            texts.append(text)
    if len(ids) < 16:
        raise ValueError(f"the tokenizer has {len(ids)} whole-word tokens, too few to synthesise a trace's prompts")
    return ids, texts


def synthesise(rows: Sequence[TraceRow], tokenizer: Any, seed: int = 0) -> list[ReplayRequest]:
    """One plain-text request per row: input_length tokens (the tokenizer's own special tokens
    included), blocks shared as the hash ids share them, output_length tokens allowed, sent at
    timestamp / 1000 s."""
    _, texts = word_tokens(tokenizer)
    specials = len(tokenizer("").input_ids)  # a BOS the tokenizer adds to every prompt
    blocks: dict[tuple[str, int, int], list[int]] = {}

    def block(key: tuple[str, int, int]) -> list[int]:
        if key not in blocks:  # seeded by the block's id, so every row that shares it gets the same words
            rng = np.random.default_rng([seed, int(key[0] == "own"), key[1] % 2**32, key[2]])
            blocks[key] = rng.integers(0, len(texts), size=BLOCK_TOKENS).tolist()
        return blocks[key]

    out = []
    for r in rows:
        need = max(1, r.input_length - specials)
        words: list[int] = []
        for k in range(math.ceil(need / BLOCK_TOKENS)):
            key = ("id", r.hash_ids[k], 0) if k < len(r.hash_ids) else ("own", r.line, k)
            words += block(key)[: need - k * BLOCK_TOKENS]
        prompt = "".join(texts[w] for w in words)
        arrival = None if r.timestamp_ms is None else r.timestamp_ms / 1000.0
        # shares: the rows' prompts share exactly the blocks their hash ids declare (the rest is
        # each row's own words), so one prefix-cache salt for them all keeps that sharing and no other
        out.append(ReplayRequest(prompt, r.output_length, arrival_s=arrival, line=r.line, shares="trace"))
    return out
