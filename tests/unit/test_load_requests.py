"""Request files (measure.load.requests): reading JSONL / CSV / Parquet, one error per kind of bad
row (file:line:field), recorded arrivals, cycling, and session turns replayed in order with the
conversation so far."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from selector.generation import GenerationRequest
from selector.trace import RequestTrace
from selector.measure.traffic import drive_level
from selector.engines.conversations import Conversations
from selector.generation import ReplayRequest
from selector.measure.jsonl import RequestFileError
from selector.measure.requests import (
    cycled,
    has_arrivals,
    read_request_file,
    recorded_arrivals,
    warmup_of,
)


def jsonl(tmp_path: Path, *rows: object) -> Path:
    path = tmp_path / "requests.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_the_packaged_sample_reads() -> None:
    rows = read_request_file("loadsets/sample.jsonl", new_tokens=32)  # found in the package from anywhere
    assert len(rows) == 12 and has_arrivals(rows)
    assert [r.turn for r in rows if r.session == "support-17"] == [1, 2, 3]
    assert [r.turn for r in rows if r.session == "trip-3"] == [1, 2, 3]
    assert rows[2].prompt[0] == {"role": "system", "content": "You answer with a single number."}
    assert rows[0].prompt == [{"role": "user", "content": rows[0].prompt[0]["content"]}]
    assert [r.max_new_tokens for r in rows[:4]] == [32, 48, 8, 64]


def test_defaults_plain_prompts_and_file_order_turns(tmp_path: Path) -> None:
    path = jsonl(tmp_path, {"prompt": "hello"}, {"prompt": "a", "session": "s"}, {"prompt": "b", "session": "s"})
    plain = read_request_file(path, new_tokens=7, chat=False)
    assert plain[0].prompt == "hello" and plain[0].max_new_tokens == 7  # a base model gets the raw text
    assert plain[1].prompt == [{"role": "user", "content": "a"}]  # session turns are chat messages
    assert [(r.session, r.turn) for r in plain] == [(None, 0), ("s", 1), ("s", 2)]
    assert not has_arrivals(plain)


def test_csv_and_parquet_read_like_jsonl(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    csv_path = tmp_path / "r.csv"
    csv_path.write_text('prompt,max_tokens,arrival_s,session\n"two\nlines",5,0.5,\nsecond,,1.5,x\n')
    rows = read_request_file(csv_path, new_tokens=9)
    assert [r.prompt[0]["content"] for r in rows] == ["two\nlines", "second"]
    assert [r.max_new_tokens for r in rows] == [5, 9] and [r.arrival_s for r in rows] == [0.5, 1.5]
    assert [r.session for r in rows] == [None, "x"]
    pq.write_table(pa.table({"prompt": ["p1", "p2"], "max_tokens": [3, None]}), tmp_path / "r.parquet")
    rows = read_request_file(tmp_path / "r.parquet", new_tokens=4)
    assert [r.max_new_tokens for r in rows] == [3, 4] and [r.line for r in rows] == [1, 2]
    bad = tmp_path / "bad.csv"
    bad.write_text("prompt,max_tokens\nok,4\nnot ok,-2\n")
    with pytest.raises(RequestFileError, match=r"bad.csv:3: field 'max_tokens'"):
        read_request_file(bad, new_tokens=4)


@pytest.mark.parametrize("rows, where, problem", [
    ([{"prompt": "ok"}, {"prompt": "   "}], ":2: field 'prompt'", "is empty"),
    ([{"messages": [{"role": "user", "content": ""}]}], ":1: field 'messages[0].content'", "is empty"),
    ([{"messages": [{"role": "bot", "content": "x"}]}], ":1: field 'messages[0].role'", "must be one of"),
    ([{"prompt": "a", "messages": [{"role": "user", "content": "b"}]}], ":1:", "exactly one of"),
    ([{}], ":1:", "exactly one of"),
    ([{"prompt": "a", "max_tokens": -3}], ":1: field 'max_tokens'", "whole number >= 1, got -3"),
    ([{"prompt": "a", "max_tokens": 2.5}], ":1: field 'max_tokens'", "whole number"),
    ([{"prompt": "a", "arrival_s": 2.0}, {"prompt": "b", "arrival_s": 1.0}], ":2: field 'arrival_s'",
     "out of order: 1 s comes after 2 s"),
    ([{"prompt": "a", "arrival_s": 0}, {"prompt": "b"}], ":2: field 'arrival_s'", "every row or on none"),
    ([{"prompt": "a", "arrival_s": -1}], ":1: field 'arrival_s'", "0 or more"),
    ([{"prompt": "a", "session": "s", "turn": 1}, {"prompt": "b", "session": "s", "turn": 3}], ":2: field 'turn'",
     "turn 3 refers to turn 2, which is missing"),
    ([{"prompt": "a", "session": "s", "turn": 2}], ":1: field 'turn'", "refers to turn 1, which is missing"),
    ([{"prompt": "a", "session": "s", "turn": 2}, {"prompt": "b", "session": "s", "turn": 1}], ":1: field 'turn'",
     "missing"),
    ([{"prompt": "a", "turn": 1}], ":1: field 'turn'", "give 'session' too"),
    ([{"prompt": "a", "tokens": 3}], ":1: field 'tokens'", "unknown field"),
    (["{not json"], ":1:", "not valid JSON"),
    (["[1, 2]"], ":1:", "JSON object"),
])
def test_each_bad_row_is_one_line_naming_file_line_and_field(tmp_path: Path, rows: list[object], where: str,
                                                              problem: str) -> None:
    path = jsonl(tmp_path, *rows)
    with pytest.raises(RequestFileError) as caught:
        read_request_file(path, new_tokens=8)
    message = str(caught.value)
    assert message.startswith(f"{path}{where}") and problem in message and "\n" not in message


def test_empty_missing_and_unknown_files(tmp_path: Path) -> None:
    with pytest.raises(RequestFileError, match="no requests"):
        read_request_file(jsonl(tmp_path), new_tokens=8)
    with pytest.raises(RequestFileError, match="not found"):
        read_request_file(tmp_path / "nope.jsonl", new_tokens=8)
    (tmp_path / "r.txt").write_text("x")
    with pytest.raises(RequestFileError, match="use .jsonl, .csv or .parquet"):
        read_request_file(tmp_path / "r.txt", new_tokens=8)


def test_recorded_arrivals_scale_and_cycling_renames_sessions(tmp_path: Path) -> None:
    path = jsonl(tmp_path, {"prompt": "a", "arrival_s": 10.0}, {"prompt": "b", "arrival_s": 10.5, "session": "s"},
                 {"prompt": "c", "arrival_s": 12.0, "session": "s"})
    rows = read_request_file(path, new_tokens=8)
    assert recorded_arrivals(rows, 1.0) == [0.0, 0.5, 2.0]
    assert recorded_arrivals(rows, 0.5) == [0.0, 0.25, 1.0]  # twice as fast
    seven = cycled(rows, 7)
    assert [(r.session, r.turn) for r in seven] == [(None, 0), ("s", 1), ("s", 2), (None, 0), ("s#1", 1),
                                                    ("s#1", 2), (None, 0)]
    assert [type(r) for r in warmup_of(rows, 2)] == [GenerationRequest, GenerationRequest]


# ---- sessions --------------------------------------------------------------------------------
class SlowEcho:
    """A real (tiny) engine: answers after a fixed delay with a text naming how long the prompt was."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    async def __call__(self, request: GenerationRequest) -> RequestTrace:
        sent = time.perf_counter()
        await asyncio.sleep(self.delay_s)
        now = time.perf_counter()
        n = len(request.prompt) if isinstance(request.prompt, list) else 1
        return RequestTrace(sent=sent, end=now, token_times=[now], output_tokens=1, text=f"reply to {n} messages")


@pytest.mark.parametrize("mode", [{"concurrency": 4}, {"rate_rps": 200.0}])
def test_session_turns_go_in_order_with_the_conversation_so_far(mode: dict[str, float]) -> None:
    turns = [ReplayRequest([{"role": "user", "content": f"{s}{k}"}], 4, session=s, turn=k)
             for k in (1, 2, 3) for s in ("a", "b")]  # interleaved, as in a recording
    alone = ReplayRequest("standalone", 4)
    conversations = Conversations()
    send = conversations.wrap(SlowEcho(0.05))
    for _ in range(2):  # two levels: each replays the sessions from scratch
        conversations.sent.clear()
        traces = asyncio.run(drive_level(send, [*turns, alone], max_duration_s=30, **mode))  # type: ignore[arg-type]
        assert all(t.ok for t in traces)
        for s in ("a", "b"):
            mine = [(r, t) for r, t in zip(turns, traces) if r.session == s]
            for (_, before), (_, after) in zip(mine, mine[1:]):
                assert after.sent >= before.end  # turn k+1 goes out after turn k's reply
            sent = [m for m in conversations.sent if isinstance(m.prompt, list) and m.prompt[0]["content"] == f"{s}1"]
            assert [len(m.prompt) for m in sent] == [1, 3, 5]  # the prefix grows by each exchange
            third = sent[-1].prompt
            assert [m["role"] for m in third] == ["user", "assistant", "user", "assistant", "user"]
            assert [m["content"] for m in third] == [f"{s}1", "reply to 1 messages", f"{s}2", "reply to 3 messages",
                                                     f"{s}3"]
        assert "standalone" in [m.prompt for m in conversations.sent]


# ---- Mooncake-style traces -------------------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from tests.tiny import build_tokenizer

    return build_tokenizer(tmp_path_factory.mktemp("tok"))


TRACE = [{"timestamp": 0, "input_length": 700, "output_length": 12, "hash_ids": [46, 47]},
         {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [46, 48]},
         {"timestamp": 1500, "input_length": 300, "output_length": 9, "hash_ids": [46]},
         {"timestamp": 2750, "input_length": 1030, "output_length": 3, "hash_ids": [49]}]


def test_a_trace_synthesises_prompts_of_its_lengths_sharing_its_blocks(tmp_path: Path, tokenizer) -> None:  # type: ignore[no-untyped-def]
    from selector.measure.requests import check_request_file
    from selector.measure.traces import BLOCK_TOKENS

    path = jsonl(tmp_path, *TRACE)
    rows = read_request_file(path, new_tokens=99, tokenizer=tokenizer)
    ids = [tokenizer(r.prompt).input_ids for r in rows]
    assert [len(x) for x in ids] == [700, 600, 300, 1030]  # exactly input_length tokens
    assert all(isinstance(r.prompt, str) for r in rows)  # plain text: no chat template around it
    assert [r.max_new_tokens for r in rows] == [12, 5, 9, 3] and [r.line for r in rows] == [1, 2, 3, 4]
    assert has_arrivals(rows) and recorded_arrivals(rows, 2.0) == [0.0, 0.0, 3.0, 5.5]  # ms -> s, time_scale
    # Block 46 is the first 512 tokens of rows 1-3 (all of row 3's 300); block 47 and 48 differ.
    assert ids[0][:BLOCK_TOKENS] == ids[1][:BLOCK_TOKENS] and ids[2] == ids[0][:300]
    assert ids[0][BLOCK_TOKENS:600] != ids[1][BLOCK_TOKENS:600]
    assert ids[3][:BLOCK_TOKENS] != ids[0][:BLOCK_TOKENS]  # 49 is its own; its second block is the row's own
    # The same trace synthesises the same prompts (seeded), another seed other ones.
    assert [r.prompt for r in read_request_file(path, 8, tokenizer=tokenizer)] == [r.prompt for r in rows]
    assert read_request_file(path, 8, tokenizer=tokenizer, seed=1)[0].prompt != rows[0].prompt
    assert check_request_file(path, 8, {"tiny": 1040}) is True  # timed; 1030 + 3 fits in 1040
    with pytest.raises(RequestFileError, match="a trace needs the model's tokenizer"):
        read_request_file(path, new_tokens=8)


@pytest.mark.parametrize("rows, where, problem", [
    ([{"timestamp": 5, "input_length": 10, "output_length": 2}, {"timestamp": 3, "input_length": 10, "output_length": 2}],
     ":2: field 'timestamp'", "goes backwards: 3 ms comes after 5 ms (line 1)"),
    ([{"timestamp": 0, "input_length": 10, "output_length": 2}, {"input_length": 10, "output_length": 2}],
     ":2: field 'timestamp'", "missing: give a timestamp on every row or on none"),
    ([{"timestamp": -1, "input_length": 10, "output_length": 2}], ":1: field 'timestamp'", "0 or more milliseconds"),
    ([{"input_length": 10.5, "output_length": 2}], ":1: field 'input_length'", "whole number of tokens >= 1"),
    ([{"input_length": 10}], ":1: field 'output_length'", "missing"),
    ([{"input_length": 600, "output_length": 2, "hash_ids": [1, 2, 3]}], ":1: field 'hash_ids'",
     "3 blocks of 512 tokens is more than input_length 600 holds (2)"),
    ([{"input_length": 10, "output_length": 2, "hash_ids": ["a"]}], ":1: field 'hash_ids'", "list of whole numbers"),
    ([{"input_length": 10, "output_length": 2}, {"input_length": 10, "output_length": 2, "prompt": "x"}],
     ":2: field 'prompt'", "unknown field of a trace row"),
])
def test_each_bad_trace_row_is_one_line_naming_file_line_and_field(tmp_path: Path, rows: list[object], where: str,
                                                                    problem: str) -> None:
    from selector.measure.requests import check_request_file

    path = jsonl(tmp_path, *rows)
    with pytest.raises(RequestFileError) as caught:
        check_request_file(path, new_tokens=8)
    message = str(caught.value)
    assert message.startswith(f"{path}{where}") and problem in message and "\n" not in message


def test_a_trace_longer_than_the_models_context_is_refused_naming_the_line(tmp_path: Path) -> None:
    from selector.measure.requests import check_request_file

    path = jsonl(tmp_path, *TRACE)
    with pytest.raises(RequestFileError) as caught:
        check_request_file(path, 8, {"tiny": 1024})
    assert str(caught.value) == (f"{path}:4: field 'input_length': input_length 1030 + output_length 3 tokens "
                                 "exceeds tiny's context of 1024 tokens")
    assert check_request_file(path, 8, {}) is True  # a context not known before loading: checked by the server
