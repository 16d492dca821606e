"""Exact counts and context errors on the real llama.cpp engine (real Qwen2 tokenizer and
Qwen2.5 template): every count equals the prompt the engine then reports it read."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from fleetgate.config.schema import ContextConfig
from fleetgate.context.counts import ExactCounter, count_prompt
from fleetgate.execute.upstream import UpstreamPool
from fleetgate.fleet import Deployment, build_fleet
from fleetgate.ingress.openai import parse_openai
from fleetgate.testing.llama import ALIAS, LlamaServer
from tests.context.chats import SHAPED, WEATHER, prompt_tokens, shaped
from tests.engines import LlamaFactory, llama_provider, misstated_tiers
from tests.harness import Stack, deployment, fleet_config

CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": json.dumps({"city": "Lyon"})},
}
CHATS: dict[str, dict[str, Any]] = {
    "plain": {"messages": [{"role": "user", "content": "Name three rivers of France."}]},
    "system and tools": {
        "messages": [
            {"role": "system", "content": "You answer in one line."},
            {"role": "user", "content": "Weather in Lyon, 2024-05-01? Digits: 31415926535"},
        ],
        "tools": [WEATHER],
        "tool_choice": "auto",
    },
    "tool calls and results": {
        "messages": [
            {"role": "user", "content": "What is the weather in Lyon?"},
            {"role": "assistant", "content": "", "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "clear", "c": 21}'},
            {"role": "user", "content": "And tomorrow? 東京の天気は"},
        ],
        "tools": [WEATHER],
    },
}


@pytest.fixture
async def counting(llama: LlamaFactory) -> AsyncIterator[tuple[LlamaServer, Deployment, Any]]:
    engine = llama(n_ctx=2048)
    fleet = build_fleet(
        fleet_config(
            {
                "providers": [llama_provider("cpp", engine)],
                "deployments": [deployment("tiny", "cpp", upstream_model=ALIAS)],
            }
        )
    )
    pool = UpstreamPool()
    yield engine, fleet.deployments["cpp"], ExactCounter(pool)
    await pool.close()


@pytest.mark.parametrize("name", list(CHATS))
async def test_a_count_is_the_prompt_the_engine_reads(
    counting: tuple[LlamaServer, Deployment, Any], name: str
) -> None:
    engine, dep, counter = counting
    body = {"model": "tiny", **CHATS[name]}
    profile = parse_openai("chat.completions", orjson.dumps(body))
    counted = await count_prompt(counter, dep, profile, ContextConfig())
    assert counted.tokens == prompt_tokens(engine, "chat.completions", body)
    # a plain-text chat's first count of its shape is the whole beside its texts
    # (/tokenize), to learn the framing: two calls; turns with tool calls, the whole alone
    assert counted.calls == (1 if name == "tool calls and results" else 2)
    again = await count_prompt(counter, dep, profile, ContextConfig())
    assert (again.tokens, again.calls) == (counted.tokens, 0)  # cached


async def test_a_learned_shape_costs_one_short_call_and_stays_exact(
    counting: tuple[LlamaServer, Deployment, Any],
) -> None:
    engine, dep, counter = counting
    calls = []
    for i, text in enumerate(SHAPED):
        body = shaped(f"You answer in one line, {i}.", text)
        profile = parse_openai("chat.completions", orjson.dumps(body))
        counted = await count_prompt(counter, dep, profile, ContextConfig())
        assert counted.tokens == prompt_tokens(engine, "chat.completions", body), text
        calls.append(counted.calls)
    # the shape counted whole once (beside its texts), then one /tokenize of the texts
    assert calls == [2] + [1] * (len(SHAPED) - 1)
    assert counter.template.learned == 1


def _with(text: str, **fields: Any) -> dict[str, Any]:
    body = shaped("Be brief.", text)
    body["messages"][1].update(fields)
    return body


# a request of a learned shape: (body, whether the learned framing may count it)
AFTER_A_LEARNED_SHAPE = {
    # whitespace at an end: the template's own tokens around it depend on the text
    "leading newline": (_with("\nLeading newline"), False),
    "trailing newline": (_with("Trailing newline\n"), False),
    "spaces at both ends": (_with(" spaced "), False),
    "a name": (_with("Hello again", name="alice"), False),  # some templates render it
    # what `messages.append(completion.choices[0].message.model_dump())` carries along
    "empty fields an SDK echoes": (
        _with("Hello again", refusal=None, tool_calls=[], annotations=[]),
        True,
    ),
}


@pytest.mark.parametrize("case", list(AFTER_A_LEARNED_SHAPE))
async def test_only_a_plain_text_message_takes_the_learned_framing(
    counting: tuple[LlamaServer, Deployment, Any], case: str
) -> None:
    engine, dep, counter = counting
    first = parse_openai("chat.completions", orjson.dumps(shaped("Be brief.", "Hello")))
    await count_prompt(counter, dep, first, ContextConfig())  # the shape learned
    body, learned = AFTER_A_LEARNED_SHAPE[case]
    profile = parse_openai("chat.completions", orjson.dumps(body))
    counted = await count_prompt(counter, dep, profile, ContextConfig())
    # one call either way: /tokenize of the texts plus the framing, or the whole
    assert counted.calls == 1
    assert (counted.basis is not None) == learned
    assert counted.tokens == prompt_tokens(engine, "chat.completions", body)


async def test_a_growing_conversation_costs_one_short_call_a_turn(
    counting: tuple[LlamaServer, Deployment, Any],
) -> None:
    engine, dep, counter = counting
    body: dict[str, Any] = {
        "model": "tiny",
        "messages": [{"role": "system", "content": "You answer briefly."}],
        "tools": [WEATHER],
    }
    calls = []
    for turn in range(4):
        if turn:
            body["messages"].append({"role": "assistant", "content": f"Answer {turn}: 12.5 °C"})
        body["messages"].append({"role": "user", "content": f"Question {turn}? 東京 x{turn}"})
        profile = parse_openai("chat.completions", orjson.dumps(body))
        counted = await count_prompt(counter, dep, profile, ContextConfig())
        assert counted.tokens == prompt_tokens(engine, "chat.completions", body), turn
        calls.append(counted.calls)
    # the first shape whole beside its texts, then the whole beside the new turn's text
    # (the step's framing learned), then one short /tokenize call a turn
    assert calls == [2, 2, 1, 1]
    assert counter.template.learned == 2


async def test_tools_are_counted_not_guessed(counting: tuple[LlamaServer, Deployment, Any]) -> None:
    engine, dep, counter = counting
    with_tools = {"model": "tiny", **CHATS["system and tools"]}
    without = {k: v for k, v in with_tools.items() if k not in ("tools", "tool_choice")}
    counts = []
    for body in (with_tools, without):
        profile = parse_openai("chat.completions", orjson.dumps(body))
        counts.append((await count_prompt(counter, dep, profile, ContextConfig())).tokens)
    # the Qwen2.5 template wraps tool schemas in a long system block
    assert counts[0] - counts[1] > 100
    assert counts[0] == prompt_tokens(engine, "chat.completions", with_tools)


async def test_a_completions_prompt_is_tokenized(
    counting: tuple[LlamaServer, Deployment, Any],
) -> None:
    engine, dep, counter = counting
    body = {"model": "tiny", "prompt": "def add(a, b):\n    return a + b  # 2024-05-01 12:00"}
    profile = parse_openai("completions", orjson.dumps(body))
    counted = await count_prompt(counter, dep, profile, ContextConfig())
    assert counted.tokens == prompt_tokens(engine, "completions", body)


def test_a_real_context_400_falls_through_and_teaches_the_window(
    stack: Stack, client_for, llama: LlamaFactory
) -> None:
    stack.start_gateway(misstated_tiers(llama, routing={"context": {"refine": {"enabled": False}}}))
    client = client_for(stack, timeout=60)
    messages = [{"role": "user", "content": "hello " * 600}]  # about 630 prompt tokens
    first = client.chat.completions.with_raw_response.create(
        model="tiny", messages=messages, max_tokens=8
    )
    assert first.headers["x-fleetgate-route"] == "big"
    assert first.headers["x-fleetgate-attempts"] == "2"  # small's real 400, then big
    record = httpx.get(f"{stack.url}/v1/requests/{first.headers['x-request-id']}", timeout=5)
    tried = [(a["deployment_id"], a["error_class"]) for a in record.json()["attempts"]]
    assert tried == [("small", "context_exceeded"), ("big", None)]
    windows = httpx.get(stack.url + "/v1/fleet/windows", timeout=5).json()["data"]
    small = next(w for w in windows if w["deployment"] == "small")
    assert (small["tokens"], small["source"]) == (512, "parsed_from_error")
    again = client.chat.completions.with_raw_response.create(
        model="tiny", messages=messages, max_tokens=8
    )
    assert (again.headers["x-fleetgate-route"], again.headers["x-fleetgate-attempts"]) == (
        "big",
        "1",
    )
