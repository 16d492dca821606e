"""Tests for the fake inference engine, over real HTTP on loopback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import orjson
import pytest

from fleetgate.testing import FakeEngine, Fault, count_prompt_tokens
from tests.harness import until

StartEngine = Callable[..., Awaitable[FakeEngine]]
CHAT = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there you"}]


@pytest.fixture
async def start_engine() -> AsyncIterator[StartEngine]:
    engines: list[FakeEngine] = []

    async def start(name: str = "alpha", **kwargs: Any) -> FakeEngine:
        engine = FakeEngine(name, **kwargs)
        await engine.start()
        engines.append(engine)
        return engine

    yield start
    for engine in engines:
        await engine.stop()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def sse_events(text: str) -> list[str]:
    """The ``data:`` payloads of an SSE body, in order."""
    return [e.removeprefix("data: ") for e in text.split("\n\n") if e.startswith("data: ")]


async def test_chat_non_stream_follows_token_rule(
    start_engine: StartEngine, session: aiohttp.ClientSession
) -> None:
    engine = await start_engine("alpha", reply_words=4)
    assert engine.url.startswith("http://127.0.0.1:") and engine.port > 0
    body = {"model": "any-name", "messages": CHAT}
    async with session.post(f"{engine.url}/v1/chat/completions", json=body) as resp:
        assert resp.status == 200
        data = await resp.json()
    assert data["object"] == "chat.completion"
    assert data["model"] == "any-name"
    assert data["system_fingerprint"] == "fake-alpha"
    assert data["fake_engine"] == "alpha"
    assert data["choices"][0]["message"] == {
        "role": "assistant",
        "content": "alpha says: w1 w2 w3 w4",
    }
    assert data["choices"][0]["finish_reason"] == "stop"
    # 2 + 3 words, plus 1 per message
    assert data["usage"] == {"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11}
    assert engine.requests[-1].path == "/v1/chat/completions"
    assert engine.requests[-1].body == body
    assert engine.active == 0


async def test_token_rule_and_max_tokens_cap(
    start_engine: StartEngine, session: aiohttp.ClientSession
) -> None:
    parts = [{"type": "text", "text": "one two"}, {"type": "image_url", "image_url": {}}]
    assert count_prompt_tokens({"messages": [{"role": "user", "content": parts}]}) == 3
    engine = await start_engine(reply_words=8)
    body = {"model": "m", "prompt": ["a b", "c"], "max_tokens": 2}
    async with session.post(f"{engine.url}/v1/completions", json=body) as resp:
        data = await resp.json()
    assert data["object"] == "text_completion"
    assert data["choices"][0]["text"] == "alpha says: w1 w2"
    assert data["choices"][0]["finish_reason"] == "length"
    assert data["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


async def test_chat_stream_chunks_usage_and_done(
    start_engine: StartEngine, session: aiohttp.ClientSession
) -> None:
    engine = await start_engine(reply_words=3, tokens_per_second=1000)
    body = {"messages": CHAT, "stream": True, "stream_options": {"include_usage": True}}
    async with session.post(f"{engine.url}/v1/chat/completions", json=body) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        events = sse_events(await resp.text())
    assert events[-1] == "[DONE]"
    chunks = [orjson.loads(e) for e in events[:-1]]
    # prefix + 3 words, a finish chunk, a usage chunk
    assert len(chunks) == 6
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1])
    assert text == "alpha says: w1 w2 w3"
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 3


async def test_tools_yield_a_tool_call(
    start_engine: StartEngine, session: aiohttp.ClientSession
) -> None:
    engine = await start_engine()
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    body = {"messages": CHAT, "tools": tools}
    async with session.post(f"{engine.url}/v1/chat/completions", json=body) as resp:
        choice = (await resp.json())["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    call = choice["message"]["tool_calls"][0]
    assert call["type"] == "function"
    assert call["function"] == {"name": "get_weather", "arguments": "{}"}


async def test_status_fault_with_retry_after_then_recovery(
    start_engine: StartEngine, session: aiohttp.ClientSession
) -> None:
    engine = await start_engine()
    engine.fail_next(Fault("status", status=429, retry_after=2), count=2)
    url = f"{engine.url}/v1/chat/completions"
    statuses = []
    for _ in range(3):
        async with session.post(url, json={"messages": CHAT}) as resp:
            statuses.append(resp.status)
            if resp.status == 429:
                assert resp.headers["Retry-After"] == "2"
                error = (await resp.json())["error"]
                assert {"message", "type", "code"} <= error.keys()
    assert statuses == [429, 429, 200]
    assert len(engine.requests) == 3


async def test_persistent_fault_hits_models_until_cleared(
    start_engine: StartEngine, session: aiohttp.ClientSession
) -> None:
    engine = await start_engine(context_window=4096, served_model="served")
    engine.set_fault(Fault("status", status=503))
    async with session.get(f"{engine.url}/v1/models") as resp:
        assert resp.status == 503
        assert "Retry-After" not in resp.headers
    engine.set_fault(None)
    async with session.get(f"{engine.url}/v1/models") as resp:
        model = (await resp.json())["data"][0]
    assert model["id"] == "served" and model["max_model_len"] == 4096


async def test_reset_drops_the_connection(
    start_engine: StartEngine, session: aiohttp.ClientSession
) -> None:
    engine = await start_engine()
    engine.fail_next(Fault("reset"))
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await session.post(f"{engine.url}/v1/chat/completions", json={"messages": CHAT})
    async with session.post(f"{engine.url}/v1/chat/completions", json={"messages": CHAT}) as r:
        assert r.status == 200
    assert engine.cancelled == 0


async def test_break_stream_errors_after_n_chunks(
    start_engine: StartEngine, session: aiohttp.ClientSession
) -> None:
    engine = await start_engine()
    engine.fail_next(Fault("break_stream", after_chunks=2))
    body = {"messages": CHAT, "stream": True}
    received: list[bytes] = []
    async with session.post(f"{engine.url}/v1/chat/completions", json=body) as resp:
        assert resp.status == 200
        with pytest.raises(aiohttp.ClientPayloadError):
            async for line in resp.content:
                received.append(line)
    assert len([line for line in received if line.startswith(b"data: ")]) == 2


@pytest.mark.parametrize(
    ("style", "text"),
    [
        (
            "vllm",
            "This model's maximum context length is 10 tokens. However, you requested 13 "
            "tokens (5 in the messages, 8 in the completion). Please reduce the length of the "
            "messages or completion.",
        ),
        ("sglang", "Requested token count exceeds the model's maximum context length of 10"),
        ("llamacpp", "request (5 tokens) exceeds the available context size (10 tokens)"),
        ("openai", "However, you requested 13 tokens (5 in the messages, 8 in the completion)"),
    ],
)
async def test_context_enforcement_per_style(
    start_engine: StartEngine, session: aiohttp.ClientSession, style: str, text: str
) -> None:
    engine = await start_engine(context_window=10, error_style=style)
    body = {"messages": [{"role": "user", "content": "a b c d"}], "max_tokens": 8}
    async with session.post(f"{engine.url}/v1/chat/completions", json=body) as resp:
        assert resp.status == 400
        data = await resp.json()
    error = data if style == "sglang" else data["error"]
    assert text in error["message"]
    if style == "llamacpp":
        assert error["type"] == "exceed_context_size_error"
        assert (error["n_prompt_tokens"], error["n_ctx"]) == (5, 10)
    if style == "openai":
        assert error["code"] == "context_length_exceeded"
    if style in ("vllm", "sglang"):
        assert (error["type"], error["code"]) == ("BadRequestError", 400)
    body["max_tokens"] = 5  # 5 + 5 fits exactly
    async with session.post(f"{engine.url}/v1/chat/completions", json=body) as resp:
        assert resp.status == 200


async def test_context_error_bad_request_and_stream_error_faults(
    start_engine: StartEngine, session: aiohttp.ClientSession
) -> None:
    engine = await start_engine(error_style="sglang", context_window=4)
    url = f"{engine.url}/v1/chat/completions"
    body = {"messages": [{"role": "user", "content": "a b c d e"}]}
    engine.fail_next(Fault("context_error"))
    engine.fail_next(Fault("bad_request"))
    engine.fail_next(Fault("stream_error_event"))
    async with session.post(url, json={"messages": CHAT}) as resp:
        assert resp.status == 400
        assert (await resp.json())["message"].startswith("The input (7 tokens) is longer")
    async with session.post(url, json={"messages": CHAT}) as resp:
        assert resp.status == 400
        assert "invalid parameter" in (await resp.json())["error"]["message"]
    async with session.post(url, json={**body, "stream": True}) as resp:
        assert resp.status == 200
        events = sse_events(await resp.text())
    assert len(events) == 1
    assert "longer than the model's context length (4 tokens)" in events[0]
    async with session.post(url, data=b"{not json") as resp:
        assert resp.status == 400


async def test_hang_counts_cancelled_when_client_leaves(
    start_engine: StartEngine, session: aiohttp.ClientSession
) -> None:
    engine = await start_engine()
    engine.fail_next(Fault("hang"))
    with pytest.raises(asyncio.TimeoutError):
        await session.post(
            f"{engine.url}/v1/completions",
            json={"prompt": "hi"},
            timeout=aiohttp.ClientTimeout(total=0.2),
        )
    await until(lambda: engine.cancelled == 1 and engine.active == 0, 2.0)


async def test_tokenize_and_embeddings(
    start_engine: StartEngine, session: aiohttp.ClientSession
) -> None:
    engine = await start_engine(context_window=512)
    engine.tokenize_delay = 0.05
    started = time.monotonic()
    async with session.post(f"{engine.url}/tokenize", json={"model": "m", "messages": CHAT}) as r:
        assert await r.json() == {"count": 7, "max_model_len": 512, "tokens": list(range(7))}
    assert time.monotonic() - started >= 0.05
    async with session.post(f"{engine.url}/tokenize", json={"prompt": "x y"}) as r:
        assert (await r.json())["count"] == 2
    assert engine.tokenize_calls == 2
    body = {"model": "emb", "input": ["a b", "c"]}
    async with session.post(f"{engine.url}/v1/embeddings", json=body) as r:
        first = await r.json()
    async with session.post(f"{engine.url}/v1/embeddings", json=body) as r:
        second = await r.json()
    vectors = [d["embedding"] for d in first["data"]]
    assert len(vectors) == 2 and all(len(v) == 8 for v in vectors)
    assert vectors[0] != vectors[1] and first["data"] == second["data"]
    assert first["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    engine.reset_counters()
    assert (engine.requests, engine.tokenize_calls, engine.cancelled) == ([], 0, 0)


async def test_body_faults_after_the_head(
    start_engine: StartEngine, session: aiohttp.ClientSession
) -> None:
    engine = await start_engine()
    url = f"{engine.url}/v1/chat/completions"
    short = aiohttp.ClientTimeout(sock_read=0.2)
    engine.fail_next(Fault("slow_first_byte", delay=0.3))
    started = time.monotonic()
    async with session.post(url, json={"messages": CHAT}) as resp:
        assert resp.status == 200 and time.monotonic() - started < 0.2  # the head at once
        assert (await resp.json())["choices"][0]["message"]["content"].startswith("alpha says:")
    assert time.monotonic() - started >= 0.3
    engine.fail_next(Fault("break_stream"))  # a whole body: cut after half of it
    async with session.post(url, json={"messages": CHAT}) as resp:
        assert resp.status == 200
        with pytest.raises(aiohttp.ClientPayloadError):
            await resp.read()
    engine.fail_next(Fault("stall_stream", after_chunks=2))
    received: list[bytes] = []
    async with session.post(url, json={"messages": CHAT, "stream": True}, timeout=short) as r:
        with pytest.raises(TimeoutError):
            async for line in r.content:
                received.append(line)
    assert len([line for line in received if line.startswith(b"data: ")]) == 2


async def test_invalid_json_and_engine_error_events(
    start_engine: StartEngine, session: aiohttp.ClientSession
) -> None:
    engine = await start_engine(error_style="sglang")
    url = f"{engine.url}/v1/chat/completions"
    engine.fail_next(Fault("invalid_json"))
    async with session.post(url, json={"messages": CHAT}) as resp:
        assert resp.status == 200 and resp.content_type == "application/json"
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(await resp.read())
    engine.fail_next(Fault("invalid_json", after_chunks=1))
    async with session.post(url, json={"messages": CHAT, "stream": True}) as resp:
        events = sse_events(await resp.text())
    assert orjson.loads(events[0])["choices"]
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(events[1])
    assert events[-1] == "[DONE]"
    fault = Fault("stream_error_event", status=500, message="Internal server error: boom")
    engine.fail_next(fault)
    async with session.post(url, json={"messages": CHAT, "stream": True}) as resp:
        assert resp.status == 200
        events = sse_events(await resp.text())
    # SGLang's own framing: json.dumps, its ErrorResponse nested under "error"
    assert events == [
        '{"error": {"object": "error", "message": "Internal server error: boom", '
        '"type": "InternalServerError", "param": null, "code": 500}}'
    ]
    engine.fail_next(fault)
    async with session.post(url, json={"messages": CHAT}) as resp:  # the same, whole
        assert resp.status == 500
        assert (await resp.json())["object"] == "error"
