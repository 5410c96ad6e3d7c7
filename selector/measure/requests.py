"""Real requests as the load set: a JSONL, CSV or Parquet file, one request per row
(measure.load.requests; the format is in docs/load-testing.md), or a Mooncake-style trace of
lengths and shared blocks (selector.measure.traces).

A row carries `prompt` (text) or `messages` (chat), and optionally `max_tokens`, `arrival_s`
(seconds since the recording started), `session` and `turn`. Turns of a session are sent in
order, each with the conversation so far (earlier turns and the replies the model actually gave),
so a server's prefix cache sees the reuse a real conversation gives it.

Fresh prompts: `salted` gives each request the prefix-cache salt (GenerationRequest.cache_salt)
that lets it reuse only what its traffic declares it shares (a session's turns, a trace's hash
ids), once per level or probe, so nothing is read from what an earlier level or the warm-up left
in a server's prefix cache (docs/load-testing.md, "Fresh prompts").

Everything is checked when the file is read, before any model loads; a problem raises
RequestFileError naming the file, the 1-based line (row, for Parquet) and the field.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from selector.generation import GenerationRequest, Messages, ReplayRequest
from selector.measure import traces
from selector.measure.jsonl import RequestFileError, json_lines
from selector.paths import find_path

FIELDS = ("prompt", "messages", "max_tokens", "arrival_s", "session", "turn", "id")
ROLES = ("system", "user", "assistant")


# ---- reading ---------------------------------------------------------------------------------
def read_request_file(path: str | Path, new_tokens: int, chat: bool = True, tokenizer: Any = None,
                      seed: int = 0) -> list[ReplayRequest]:
    """The file's requests in file order. chat=False (a plain-prompt model): `prompt` is sent as
    raw text; otherwise as one user message. Session turns are always chat messages. A Mooncake-style
    trace (selector.measure.traces) has its prompts synthesised with `tokenizer` (a tokenizer, or
    the folder holding one)."""
    found, shown = _located(path)
    if traces.is_trace(found):
        rows = traces.read_trace(found, shown)
        if tokenizer is None:
            raise RequestFileError(shown, None, None, "a trace needs the model's tokenizer to synthesise its prompts")
        if isinstance(tokenizer, (str, Path)):
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(tokenizer))
        return traces.synthesise(rows, tokenizer, seed)
    return _read_rows(found, shown, new_tokens, chat)


def check_request_file(path: str | Path, new_tokens: int, contexts: dict[str, int] | None = None) -> bool:
    """Before anything loads: read and check the file (a trace: also each model's context, model
    name -> tokens); whether its rows carry arrival times."""
    found, shown = _located(path)
    if traces.is_trace(found):
        rows = traces.read_trace(found, shown)
        for model, context in (contexts or {}).items():
            traces.check_context(rows, shown, context, model)
        return rows[0].timestamp_ms is not None
    return has_arrivals(_read_rows(found, shown, new_tokens, chat=True))


def _located(path: str | Path) -> tuple[Path, str]:
    found = find_path(path)
    shown = str(path)
    if not found.is_file():
        raise RequestFileError(shown, None, None, "request file not found" if not found.exists() else "not a file")
    return found, shown


def _read_rows(found: Path, shown: str, new_tokens: int, chat: bool) -> list[ReplayRequest]:
    rows = list(_rows(found, shown))
    if not rows:
        raise RequestFileError(shown, None, None, "no requests in this file")
    out = [_request(shown, line, row, new_tokens, chat) for line, row in rows]
    _check_arrivals(shown, out)
    _check_sessions(shown, out)
    return out


def _rows(path: Path, shown: str) -> Any:
    """(line, row) pairs: JSONL and CSV lines as in the file, Parquet rows from 1."""
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        yield from json_lines(path, shown)
    elif suffix == ".csv":
        with path.open(encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            for row in reader:  # the header is line 1; a quoted newline makes a row span lines
                yield reader.line_num, {k: v for k, v in row.items() if v not in ("", None)}
    elif suffix == ".parquet":
        import pyarrow.parquet as pq

        for i, row in enumerate(pq.read_table(path).to_pylist(), 1):
            yield i, {k: v for k, v in row.items() if v is not None}
    else:
        raise RequestFileError(shown, None, None,
                               f"unknown format {suffix or '(no suffix)'!r}: use .jsonl, .csv or .parquet")


def _request(shown: str, line: int, row: dict[str, Any], new_tokens: int, chat: bool) -> ReplayRequest:
    def bad(field: str | None, problem: str) -> RequestFileError:
        return RequestFileError(shown, line, field, problem)

    unknown = sorted(set(row) - set(FIELDS))
    if unknown:
        raise bad(unknown[0], f"unknown field; known: {', '.join(FIELDS)}")
    if ("prompt" in row) == ("messages" in row):
        raise bad(None, "give exactly one of 'prompt' (text) and 'messages' (chat)")
    session = row.get("session")
    if session is not None:
        session = str(session)
        if not session.strip():
            raise bad("session", "is empty: leave it out for a request outside any conversation")
    if "prompt" in row:
        prompt = row["prompt"]
        if not isinstance(prompt, str) or not prompt.strip():
            raise bad("prompt", "is empty" if isinstance(prompt, str) else f"must be text, got {type(prompt).__name__}")
        body: str | Messages = [{"role": "user", "content": prompt}] if chat or session else prompt
    else:
        body = _messages(bad, row["messages"])
    max_tokens = _whole(bad, "max_tokens", row.get("max_tokens", new_tokens), minimum=1)
    arrival = row.get("arrival_s")
    if arrival is not None:
        arrival = _number(bad, "arrival_s", arrival)
        if arrival < 0:
            raise bad("arrival_s", f"must be 0 or more seconds, got {arrival:g}")
    turn = _whole(bad, "turn", row["turn"], minimum=1) if "turn" in row else 0
    if turn and session is None:
        raise bad("turn", "a turn belongs to a session: give 'session' too")
    return ReplayRequest(body, max_tokens, arrival_s=arrival, session=session, turn=turn, line=line)


def _messages(bad: Callable[[str | None, str], RequestFileError], value: Any) -> Messages:
    if isinstance(value, str):  # a CSV cell holds the JSON list
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise bad("messages", f"not a JSON list of messages: {e.msg}") from None
    if not isinstance(value, list) or not value:
        raise bad("messages", "must be a non-empty list of {role, content} objects")
    for i, m in enumerate(value):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise bad(f"messages[{i}].role", f"must be one of {', '.join(ROLES)}")
        if not isinstance(m.get("content"), str) or not m["content"].strip():
            raise bad(f"messages[{i}].content", "is empty")
    return [{"role": m["role"], "content": m["content"]} for m in value]


def _number(bad: Callable[[str | None, str], RequestFileError], field: str, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise bad(field, f"must be a number, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(number):
        raise bad(field, f"must be a finite number, got {value!r}")
    return number


def _whole(bad: Callable[[str | None, str], RequestFileError], field: str, value: Any, minimum: int) -> int:
    number = _number(bad, field, value)
    if number != int(number) or number < minimum:
        raise bad(field, f"must be a whole number >= {minimum}, got {value!r}")
    return int(number)


def _check_arrivals(shown: str, requests: list[ReplayRequest]) -> None:
    """All rows or none carry an arrival time, in non-decreasing order (the file is the timeline)."""
    timed = [r for r in requests if r.arrival_s is not None]
    if timed and len(timed) != len(requests):
        first = next(r for r in requests if r.arrival_s is None)
        raise RequestFileError(shown, first.line, "arrival_s", "missing: give an arrival time on every row or on none")
    for before, after in zip(timed, timed[1:]):
        if after.arrival_s < before.arrival_s:  # type: ignore[operator]
            raise RequestFileError(shown, after.line, "arrival_s",
                                   f"out of order: {after.arrival_s:g} s comes after {before.arrival_s:g} s "
                                   f"(line {before.line}); sort the file by arrival time")


def _check_sessions(shown: str, requests: list[ReplayRequest]) -> None:
    """Turns of a session are numbered 1, 2, ... in file order (unnumbered: file order numbers them)."""
    last: dict[str, int] = {}
    for r in requests:
        if r.session is None:
            continue
        expected = last.get(r.session, 0) + 1
        if r.turn == 0:
            r.turn = expected
        elif r.turn != expected:
            problem = (f"session {r.session!r} turn {r.turn} refers to turn {r.turn - 1}, which is missing"
                       if r.turn > expected else
                       f"session {r.session!r} turn {r.turn} comes after turn {expected - 1}: turns go in file order")
            raise RequestFileError(shown, r.line, "turn", problem)
        last[r.session] = r.turn


# ---- using the rows --------------------------------------------------------------------------
def has_arrivals(requests: Sequence[GenerationRequest]) -> bool:
    return bool(requests) and all(isinstance(r, ReplayRequest) and r.arrival_s is not None for r in requests)


def recorded_arrivals(requests: Sequence[GenerationRequest], time_scale: float) -> list[float]:
    """Send times from the recorded ones: from 0, stretched by time_scale (0.5: twice as fast)."""
    first = requests[0].arrival_s  # type: ignore[attr-defined]
    return [(r.arrival_s - first) * time_scale for r in requests]  # type: ignore[attr-defined]


def cycled(requests: Sequence[ReplayRequest], n: int) -> list[ReplayRequest]:
    """n requests: the file repeated as often as needed; each copy's sessions (and a trace's
    sharing) are new ones."""
    out = []
    for i in range(n):
        r = requests[i % len(requests)]
        copy = i // len(requests)
        if copy and (r.session is not None or r.shares is not None):
            r = replace(r, session=None if r.session is None else f"{r.session}#{copy}",
                        shares=None if r.shares is None else f"{r.shares}#{copy}")
        out.append(r)
    return out


def warmup_of(requests: Sequence[ReplayRequest], n: int) -> list[GenerationRequest]:
    """The first n rows as standalone requests (no conversation around them)."""
    return [GenerationRequest(r.prompt, r.max_new_tokens, list(r.stop), cache_salt=r.cache_salt) for r in requests[:n]]


# ---- fresh prompts ---------------------------------------------------------------------------
SALT_FORBIDDEN = "@/\\\0"  # characters vLLM refuses in a cache_salt (which it takes up to 128 characters)


def declared_group(request: GenerationRequest) -> str | None:
    """What a request declares it shares a prompt prefix with: its session (the conversation so
    far), or its trace copy (the blocks its hash_ids share); None: nothing (an eval-set prompt, a
    request file's row outside a session)."""
    if isinstance(request, ReplayRequest):
        if request.session is not None:
            return f"session:{request.session}"
        if request.shares is not None:
            return f"shares:{request.shares}"
    return None


def salted(requests: Sequence[GenerationRequest], tag: str) -> list[GenerationRequest]:
    """Copies of `requests` with fresh prefix-cache salts (GenerationRequest.cache_salt): the
    requests of one declared group (declared_group: a session's turns, one copy of a trace) share a
    salt, so the prefixes their traffic declares shared are still found cached; every other request
    gets a salt of its own, so no request is served from another's cached prompt (an eval-set
    prompt repeated, or a few-shot header shared by a task's prompts, is computed afresh, as a
    stream of distinct users' requests would be).

    Every call draws a new nonce: two calls never share a salt, whatever `tag` says, so a level or
    capacity probe that calls it for its own requests finds nothing an earlier one (or the warm-up,
    or an earlier run on a server that outlives it) left cached. `tag` only makes the salt readable
    in a server's logs: `{tag}-{nonce}-{i}` per request, `{tag}-{nonce}-g{digest of the group}`
    per group. An engine that does not take salts ignores them (Engine.prefix_cache)."""
    base = "".join("_" if c in SALT_FORBIDDEN else c for c in tag)[:48] + "-" + uuid.uuid4().hex[:8]
    out: list[GenerationRequest] = []
    for i, r in enumerate(requests):
        group = declared_group(r)
        suffix = str(i) if group is None else "g" + hashlib.sha256(group.encode()).hexdigest()[:12]
        out.append(replace(r, cache_salt=f"{base}-{suffix}"))
    return out

