"""The exact-count requests each engine kind gets, against small stand-in servers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp import web

from fleetgate.config.schema import ContextConfig
from fleetgate.context.counts import CHAT_COUNT_PATH
from fleetgate.context.refine import ContextRefiner
from fleetgate.execute.upstream import UpstreamPool
from fleetgate.fleet import build_fleet
from fleetgate.ingress.openai import parse_openai
from fleetgate.routing.planner import build_plan
from fleetgate.state.runtime import MemoryState
from tests.harness import fleet_config

# 80 ten-digit numbers: a band that straddles the 1000 window; the stand-in counts 80 words
MESSAGES = [{"role": "user", "content": " ".join(["1234567890"] * 80)}]
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []


def _rendered(messages: list[dict[str, Any]]) -> str:
    """The stand-in's chat template: `<|role|>content` a message."""
    return "".join(f"<|{m['role']}|>{m['content']}" for m in messages)


async def _stand_in(bos: bool, chat_count: bool) -> AsyncIterator[tuple[str, Recorder]]:
    """Answers llama.cpp's /apply-template, /tokenize and /v1/messages/count_tokens, and
    SGLang's /v1/tokenize; one token a word, seven a tool schema. With `chat_count`, a
    llama.cpp that counts an OpenAI chat (/v1/chat/completions/input_tokens); without, one
    that predates it (a 404, recorded). With `bos`, a vocabulary with a BOS token, which
    llama.cpp puts before a prompt it serves (its counts count it), and which /tokenize
    adds only when asked (`add_special`), before a list's first string."""
    seen = Recorder()

    async def apply_template(request: web.Request) -> web.Response:
        body = await request.json()
        seen.calls.append((request.path, body))
        return web.json_response({"prompt": _rendered(body["messages"])})

    async def input_tokens(request: web.Request) -> web.Response:
        body = await request.json()
        seen.calls.append((request.path, body))
        if not chat_count:
            return web.json_response({"error": "File Not Found"}, status=404)
        words = len(_rendered(body["messages"]).split())
        tools = 7 * len(body.get("tools", ()))
        return web.json_response({"input_tokens": bos + words + tools})

    async def tokenize(request: web.Request) -> web.Response:
        body = await request.json()
        seen.calls.append((request.path, body))
        text = body.get("content") if "content" in body else body.get("prompt")
        texts = text if isinstance(text, list) else [text]  # llama.cpp: each one apart
        special = int(bos and bool(body.get("add_special")))
        return web.json_response(
            {"tokens": list(range(special + sum(len(t.split()) for t in texts)))}
        )

    async def count_tokens(request: web.Request) -> web.Response:
        body = await request.json()
        seen.calls.append((request.path, body))
        words = sum(len(m["content"].split()) for m in body["messages"])
        return web.json_response({"input_tokens": bos + words + 7 * len(body.get("tools", ()))})

    app = web.Application()
    app.router.add_post("/v1/messages/count_tokens", count_tokens)
    app.router.add_post("/v1/chat/completions/input_tokens", input_tokens)
    app.router.add_post("/apply-template", apply_template)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/v1/tokenize", tokenize)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}", seen
    await runner.cleanup()


@pytest.fixture
async def engine() -> AsyncIterator[tuple[str, Recorder]]:
    async for served in _stand_in(bos=False, chat_count=True):
        yield served


@pytest.fixture
async def older_engine() -> AsyncIterator[tuple[str, Recorder]]:
    async for served in _stand_in(bos=False, chat_count=False):
        yield served


@pytest.fixture
async def bos_engine() -> AsyncIterator[tuple[str, Recorder]]:
    async for served in _stand_in(bos=True, chat_count=False):
        yield served


async def _refine(kind: str, url: str, body: dict[str, Any]) -> tuple[Any, Any]:
    fleet = build_fleet(
        fleet_config(
            {
                "providers": [
                    {"id": "small", "kind": kind, "base_url": url + "/v1"},
                    {"id": "big", "kind": kind, "base_url": "http://127.0.0.1:9/v1"},
                ],
                "deployments": [
                    {"id": "small", "model": "m", "provider": "small", "context_window": 1000},
                    {"id": "big", "model": "m", "provider": "big", "context_window": 10000},
                ],
            }
        )
    )
    profile = parse_openai("chat.completions", orjson.dumps({"model": "m", **body}))
    plan = build_plan(profile, fleet, MemoryState())
    assert [c.deployment.id for c in plan.candidates] == ["big", "small"]  # by the estimate
    pool = UpstreamPool()
    try:
        await ContextRefiner(pool).refine(plan, profile, fleet)
    finally:
        await pool.close()
    return plan, profile


async def test_llamacpp_counts_a_plain_chat_with_its_tools_whole_then_by_its_text(
    engine: tuple[str, Recorder],
) -> None:
    url, seen = engine
    body = {"messages": MESSAGES, "max_tokens": 10, "tools": TOOLS}
    plan, profile = await _refine("llamacpp", url, body)
    # the shape's first count: the whole (the chat as it is, tools included) beside the texts
    assert sorted(path for path, _ in seen.calls) == ["/tokenize", CHAT_COUNT_PATH]
    sent = dict(seen.calls)[CHAT_COUNT_PATH]
    assert sent == {"model": "m", "messages": MESSAGES, "tools": TOOLS}
    assert dict(seen.calls)["/tokenize"] == {"content": [MESSAGES[0]["content"]]}
    assert profile.context.exact and profile.context.prompt_tokens == 80 + 7
    assert plan.notes["context_refine"] == "exact"
    assert plan.notes["context_template"]["text"] == 80  # what the answer's usage checks
    assert [c.deployment.id for c in plan.candidates] == ["small", "big"]
    assert plan.headers["X-Fleetgate-Context-Estimate"] == "97; exact"


async def _count_runs(url: str, extra: dict[str, object]) -> list[int]:
    """Exact counts of two chats of 80 and 30 words (with `extra` fields), one after the
    other, on a one-deployment llama.cpp fleet at `url`: the second on a learned shape."""
    chats = [[{"role": "user", "content": "9 " * words + "x"}] for words in (80, 30)]
    return await _counts(url, [{"messages": m, **extra} for m in chats])


async def _counts(url: str, bodies: list[dict[str, object]]) -> list[int]:
    """Exact counts of chats, one after the other, on a one-deployment llama.cpp fleet."""
    fleet = build_fleet(
        fleet_config(
            {
                "providers": [{"id": "p", "kind": "llamacpp", "base_url": url + "/v1"}],
                "deployments": [{"id": "d", "model": "m", "provider": "p"}],
            }
        )
    )
    dep = fleet.deployments["d"]
    pool = UpstreamPool()
    refiner = ContextRefiner(pool)
    counts = []
    try:
        for body in bodies:
            profile = parse_openai("chat.completions", orjson.dumps({"model": "m", **body}))
            counts.append(await refiner.count(dep, profile, ContextConfig()))
    finally:
        await pool.close()
    return counts


async def test_llamacpp_counts_a_learned_shape_by_its_text_alone(
    engine: tuple[str, Recorder],
) -> None:
    url, seen = engine
    counts = await _count_runs(url, {"tools": TOOLS})
    assert counts == [81 + 7, 31 + 7]  # the framing (the tool's 7) learned from the first
    assert [path for path, _ in seen.calls][2:] == ["/tokenize"]


_CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
WITH_TOOL_CALLS = [
    *MESSAGES,
    {"role": "assistant", "content": "", "tool_calls": [_CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "done"},
]


async def test_llamacpp_counts_turns_with_tool_calls_in_one_call(
    engine: tuple[str, Recorder],
) -> None:
    url, seen = engine
    body = {"messages": WITH_TOOL_CALLS, "max_tokens": 10, "tools": TOOLS, "tool_choice": "auto"}
    plan, profile = await _refine("llamacpp", url, body)
    assert seen.calls == [
        (
            CHAT_COUNT_PATH,
            {"model": "m", "messages": WITH_TOOL_CALLS, "tools": TOOLS, "tool_choice": "auto"},
        )
    ]
    # `<|user|>1234567890 … 1234567890<|assistant|><|tool|>done`: 80 words; the tool's 7
    assert profile.context.exact and profile.context.prompt_tokens == 80 + 7
    assert plan.notes["context_count_calls"] == 1


async def test_an_older_llamacpp_applies_the_template_then_tokenizes_turns_with_tool_calls(
    older_engine: tuple[str, Recorder],
) -> None:
    url, seen = older_engine
    body = {"messages": WITH_TOOL_CALLS, "max_tokens": 10, "tools": TOOLS, "tool_choice": "auto"}
    _plan, profile = await _refine("llamacpp", url, body)
    paths = [path for path, _ in seen.calls]
    assert paths == [CHAT_COUNT_PATH, "/apply-template", "/tokenize"]  # the first: a 404
    assert seen.calls[1][1] == {"messages": WITH_TOOL_CALLS, "tools": TOOLS, "tool_choice": "auto"}
    assert seen.calls[2][1]["content"].startswith("<|user|>1234567890")
    # the stand-in's template renders no tools
    assert profile.context.exact and profile.context.prompt_tokens == 80


async def test_an_older_llamacpp_is_asked_for_the_chat_count_once(
    older_engine: tuple[str, Recorder],
) -> None:
    """Its plain chats go to the Messages API's count_tokens, tools included; the endpoint
    it lacks is not asked again."""
    url, seen = older_engine
    turns = [
        {"role": "user", "content": "one two"},
        {"role": "assistant", "content": "three"},
        {"role": "user", "content": "9 " * 30 + "x"},
    ]
    counts = await _counts(url, [{"messages": m, "tools": TOOLS} for m in (MESSAGES, turns)])
    assert counts == [80 + 7, 3 + 31 + 7]  # two shapes: each counted whole
    paths = [path for path, _ in seen.calls]
    assert paths.count(CHAT_COUNT_PATH) == 1
    assert paths.count("/v1/messages/count_tokens") == 2
    sent = dict(seen.calls)["/v1/messages/count_tokens"]
    assert sent["tools"] == [{"name": "f", "description": "", "input_schema": {"type": "object"}}]


# requests whose whole prompt llama.cpp tokenizes: (endpoint, body, words of the prompt)
WHOLE_PROMPTS = {
    "templated turns with tool calls": (
        "chat.completions",
        {
            "messages": [
                {"role": "user", "content": "one two three"},
                {"role": "assistant", "content": "", "tool_calls": [_CALL]},
                {"role": "tool", "tool_call_id": "c1", "content": "done"},
            ],
            "tools": TOOLS,
        },
        # the stand-in's template, `<|role|>content` a message: `<|user|>one`, `two`,
        # `three<|assistant|><|tool|>done`
        3,
    ),
    "a completions prompt": ("completions", {"prompt": "one two three four"}, 4),
}


@pytest.mark.parametrize("case", list(WHOLE_PROMPTS))
async def test_llamacpp_counts_the_special_tokens_a_served_prompt_carries(
    bos_engine: tuple[str, Recorder], case: str
) -> None:
    """On a vocabulary with a BOS token, the prompt the engine serves starts with it, and
    its window and usage count it: a whole prompt is tokenized with `add_special`."""
    url, seen = bos_engine
    endpoint, body, words = WHOLE_PROMPTS[case]
    fleet = build_fleet(
        fleet_config(
            {
                "providers": [{"id": "p", "kind": "llamacpp", "base_url": url + "/v1"}],
                "deployments": [{"id": "d", "model": "m", "provider": "p"}],
            }
        )
    )
    profile = parse_openai(endpoint, orjson.dumps({"model": "m", **body}))
    pool = UpstreamPool()
    try:
        counted = await ContextRefiner(pool).count(fleet.deployments["d"], profile, ContextConfig())
    finally:
        await pool.close()
    assert counted == words + 1  # the BOS included
    assert [b.get("add_special") for path, b in seen.calls if path == "/tokenize"] == [True]


async def test_llamacpp_texts_counted_apart_carry_no_special_tokens(
    bos_engine: tuple[str, Recorder],
) -> None:
    """A learned shape's next request: its texts without specials, the framing (the BOS
    among it) learned from the whole count."""
    url, seen = bos_engine
    counts = await _count_runs(url, {})
    assert counts == [1 + 81, 1 + 31]
    assert [b.get("add_special") for path, b in seen.calls if path == "/tokenize"] == [None] * 2


async def test_sglang_counts_text_at_v1_tokenize_plus_estimated_overheads(
    engine: tuple[str, Recorder],
) -> None:
    url, seen = engine
    body = {"messages": MESSAGES, "max_tokens": 10, "tools": TOOLS}
    plan, profile = await _refine("sglang", url, body)
    assert [path for path, _ in seen.calls] == ["/v1/tokenize"]
    # the text and the tool schemas, counted; the template's scaffolding, estimated
    assert (
        seen.calls[0][1]["prompt"] == MESSAGES[0]["content"] + "\n" + orjson.dumps(TOOLS).decode()
    )
    counted = 80 + 1  # the stand-in counts the JSON as one word
    assert profile.context.exact and profile.context.prompt_tokens > counted
    assert [c.deployment.id for c in plan.candidates] == ["small", "big"]


async def test_unreachable_tokenizer_keeps_the_estimate() -> None:
    plan, profile = await _refine(
        "vllm", "http://127.0.0.1:9", {"messages": MESSAGES, "max_tokens": 10}
    )
    assert not profile.context.exact
    assert plan.notes["context_refine"] == "failed"
    assert [c.deployment.id for c in plan.candidates] == ["big", "small"]


async def test_engines_without_a_tokenizer_are_not_asked() -> None:
    plan, profile = await _refine(
        "openai", "http://127.0.0.1:9", {"messages": MESSAGES, "max_tokens": 10}
    )
    assert plan.notes["context_refine"] == "no_tokenizer"
    assert not profile.context.exact
