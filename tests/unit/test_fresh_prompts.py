"""Fresh prompts (issue 48, point 3): no load-test request profits from a server's prefix cache
unless its traffic declares the sharing. The salts (`salted`), the request body that carries them
to an engine that takes them, the ladder's fresh salts per level, and the one-line warning before
anything loads for an engine whose prefix cache cannot be isolated. (On real vLLM:
tests/integration/test_vllm_engine.py, test_vllm_prefix_cache_sees_only_declared_sharing.)"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from selector.config import LoadConfig
from selector.generation import GenerationRequest
from selector.engines.served.client import OpenAIClient
from selector.trace import RequestTrace
from selector.engines.conversations import Conversations
from selector.generation import ReplayRequest
from selector.measure.requests import (
    SALT_FORBIDDEN,
    cycled,
    declared_group,
    salted,
    warmup_of,
)


def body(engine: OpenAIClient, request: GenerationRequest) -> dict:
    return engine._body(request, stream=True)[1]


def test_the_salt_goes_in_the_body_only_when_set_and_the_engine_takes_salts() -> None:
    vllm = OpenAIClient("http://127.0.0.1:1/v1", "variant", extensions=True, cache_salt=True)
    other = OpenAIClient("http://127.0.0.1:1/v1", "variant")  # a server that may refuse the field
    plain = GenerationRequest("The food was", 4, cache_salt="run-c1-0")
    chat = GenerationRequest([{"role": "user", "content": "12 plus 30?"}], 4, cache_salt="run-c1-1")
    assert body(vllm, plain)["cache_salt"] == "run-c1-0" and body(vllm, chat)["cache_salt"] == "run-c1-1"
    assert "messages" in body(vllm, chat) and "prompt" in body(vllm, plain)
    assert "cache_salt" not in body(other, plain) and "cache_salt" not in body(other, chat)
    assert "cache_salt" not in body(vllm, GenerationRequest("The food was", 4))  # no salt: nothing sent
    # a copy for another concurrency keeps what the server takes
    assert body(vllm.with_concurrency(3), plain)["cache_salt"] == "run-c1-0"


def test_eval_set_prompts_each_get_a_salt_of_their_own_and_every_call_new_ones() -> None:
    pool = [GenerationRequest(p, 8, ["\n"]) for p in ("a long few-shot header, then question 1",
                                                      "a long few-shot header, then question 2")]
    requests = [pool[i % 2] for i in range(6)]  # cycled: the same prompt objects repeat
    first, second = salted(requests, "c1"), salted(requests, "c1")  # the same tag twice
    salts = [r.cache_salt for r in first]
    assert len(set(salts)) == 6  # a repeated prompt is not another's: no request reads another's cache
    assert not set(salts) & {r.cache_salt for r in second}  # a later level finds nothing of this one's
    assert all(s.startswith("c1-") for s in salts)
    # copies: prompts, budgets and stops unchanged, the originals untouched
    assert [(r.prompt, r.max_new_tokens, r.stop) for r in first] == [(r.prompt, r.max_new_tokens, r.stop)
                                                                     for r in requests]
    assert all(r.cache_salt is None for r in requests) and first[0].prompt is requests[0].prompt
    # a salt vLLM takes, whatever the tag: at most 128 characters, none of @ / \ NUL
    for r in salted(requests, "probe/rate@4\\" + "x" * 200):
        assert len(r.cache_salt) <= 128 and not set(r.cache_salt) & set(SALT_FORBIDDEN)


def test_declared_sharing_is_kept_within_a_call_and_nothing_else() -> None:
    turns = [ReplayRequest([{"role": "user", "content": f"{s}{k}"}], 4, session=s, turn=k)
             for s in ("a", "b") for k in (1, 2)]
    alone = [ReplayRequest("standalone", 4), ReplayRequest("standalone", 4)]
    trace = [ReplayRequest(f"row {i}", 4, line=i + 1, shares="trace") for i in range(3)]
    rows = [*turns, *alone, *trace]
    out = salted(rows, "c2")
    salt = {id(r): s.cache_salt for r, s in zip(rows, out)}
    # a session's turns share one salt (each turn carries the conversation so far); sessions differ
    assert salt[id(turns[0])] == salt[id(turns[1])] != salt[id(turns[2])] == salt[id(turns[3])]
    # rows outside a session declare nothing: their own, even with the same text
    assert salt[id(alone[0])] != salt[id(alone[1])]
    # a trace's rows share one salt: their prompts share exactly the blocks their hash_ids declare
    assert len({salt[id(r)] for r in trace}) == 1
    assert len(set(salt.values())) == 2 + 2 + 1
    assert [declared_group(r) for r in (turns[0], alone[0], trace[0], GenerationRequest("x", 1))] == [
        "session:a", None, "shares:trace", None]
    # the file cycled: each copy's sessions and trace are new ones, so copies share nothing
    copies = salted(cycled(trace + turns[:2], 10), "c3")
    assert len({r.cache_salt for r in copies}) == 4  # (a trace copy + a session) for each of 2 copies, ...
    assert copies[0].cache_salt == copies[2].cache_salt != copies[5].cache_salt  # ... one per copy


def test_a_session_turn_and_a_warm_up_keep_their_salt() -> None:
    sent: list[GenerationRequest] = []

    async def echo(request: GenerationRequest) -> RequestTrace:
        sent.append(request)
        now = time.perf_counter()
        return RequestTrace(sent=now, end=now, token_times=[now], output_tokens=1, text="ok")

    send = Conversations().wrap(echo)
    turns = salted([ReplayRequest("hi", 4, session="s", turn=1), ReplayRequest("more", 4, session="s", turn=2)], "c1")

    async def both() -> None:
        for t in turns:
            await send(t)

    asyncio.run(both())
    assert [len(r.prompt) for r in sent] == [1, 3]  # the conversation so far
    assert sent[0].cache_salt == sent[1].cache_salt == turns[0].cache_salt is not None
    assert warmup_of(salted([ReplayRequest("x", 4)], "w"), 1)[0].cache_salt is not None


def test_the_ladder_salts_the_warm_up_and_every_level_afresh() -> None:
    from selector.engines.spec import Channel
    from selector.measure.load_driver import Probe
    from selector.measure.traffic import ladder
    from selector.resources.utilization import UtilizationMonitor

    seen: list[str | None] = []

    async def send(request: GenerationRequest) -> RequestTrace:
        seen.append(request.cache_salt)
        now = time.perf_counter()
        return RequestTrace(sent=now, end=now, token_times=[now], output_tokens=1, text="ok")

    cfg = LoadConfig(enabled=True, concurrency=[1, 2], rates_rps=[500.0], requests_per_level=4)
    probe = Probe(Channel(send, lambda: UtilizationMonitor(None, time.thread_time, [], subtract_harness=True)), cfg)
    pool = [GenerationRequest("same prompt", 2)] * 4
    replay = [0.0, 0.001, 0.002, 0.003]
    outcomes = asyncio.run(ladder(probe, pool, warmup=pool[:2], replay=replay))
    assert [o.level.requests for o in outcomes] == [4, 4, 4, 4] and outcomes[-1].level.replay_scale == 1.0
    warm, levels = seen[:2], [seen[2 + 4 * k: 6 + 4 * k] for k in range(4)]
    assert None not in seen and len(set(seen)) == len(seen) == 18  # every request its own salt, never reused
    assert all(s.startswith("warmup-") for s in warm)
    assert [lv[0].split("-")[0] for lv in levels] == ["c1", "c2", "r500", "recorded"]


# ---- the engines: which take salts, and the warning before anything loads ----------------------
def test_which_engines_isolate_their_prefix_cache() -> None:
    from selector.compose import compose
    from selector.engines import engine_for

    def mode(*overrides: str) -> str:
        return engine_for(compose(list(overrides)).engine).prefix_cache()

    assert mode("engine=vllm") == "salt"  # vLLM takes cache_salt
    assert mode("engine=hf") == "none"  # in-process: every batch of the load test starts from an empty cache
    assert mode("engine=openai-transformers") == "none"  # transformers serve keeps none across requests
    assert mode("engine=openai") == "unknown"  # a server someone else runs: unknown until the user says
    assert mode("engine=openai", "engine.prefix_cache=salt") == "salt"


def test_an_unknown_prefix_cache_mode_is_refused() -> None:
    from selector.compose import compose
    from selector.errors import UserError

    with pytest.raises(UserError, match="engine.prefix_cache.*salt .*none .*or unknown, got 'yes'"):
        compose(["engine=openai", "engine.prefix_cache=yes"])


def test_an_attached_server_without_salts_is_one_warning_before_anything_loads(caplog, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from selector.compose import compose
    from selector.sweep.preflight import PlannedVariant, prefix_cache_notices

    def planned(*overrides: str) -> list[PlannedVariant]:
        cfg = compose([*overrides, f"cache_dir={tmp_path}"])
        return [PlannedVariant(cfg, [], f"k{i}", True, "") for i in range(2)]  # two variants, one engine

    with caplog.at_level(logging.WARNING, logger="selector.sweep.preflight"):
        (line,) = prefix_cache_notices(planned("engine=openai", "measure.load.enabled=true"))
    assert line in caplog.text and "\n" not in line
    assert line.startswith("engine openai (http://127.0.0.1:8000/v1): its prefix cache cannot be isolated")
    assert "prefix-cache hit rates, throughput and capacity may be inflated" in line
    assert "engine.prefix_cache=salt" in line
    assert prefix_cache_notices(planned("engine=openai", "measure.load.capacity=true"))  # capacity alone, too
    for quiet in (("engine=openai",),  # no load test: nothing to inflate
                  ("engine=openai", "engine.prefix_cache=salt", "measure.load.enabled=true"),
                  ("engine=openai", "engine.prefix_cache=none", "measure.load.enabled=true"),
                  ("engine=vllm", "measure.load.enabled=true"), ("engine=hf", "measure.load.enabled=true")):
        assert prefix_cache_notices(planned(*quiet)) == [], quiet
