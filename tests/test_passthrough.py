"""Pass-through fidelity: bodies go upstream with only `model` rewritten, and come back intact."""

from __future__ import annotations

import openai
import pytest

from tests.harness import Stack, deployment, provider


@pytest.fixture
def one(stack: Stack):
    a = stack.engine("a", context_window=4096)
    b = stack.engine("b", context_window=16384)
    stack.start_gateway(
        {
            "providers": [provider("pa", a), provider("pb", b)],
            "deployments": [
                deployment("chat-m", "pa", upstream_model="org/upstream-a", context_window=4096),
                deployment("other-m", "pb", upstream_model="org/upstream-b", context_window=16384),
                {
                    "id": "pb-small",
                    "model": "chat-m",
                    "provider": "pb",
                    "upstream_model": "org/upstream-b",
                    "context_window": 4096,
                    "priority": 5,
                },
            ],
        }
    )
    return stack


def test_unknown_request_fields_reach_upstream_and_only_model_changes(one: Stack, client_for):
    client = client_for(one)
    client.chat.completions.create(
        model="chat-m",
        messages=[{"role": "user", "content": "hello world"}],
        temperature=0.3,
        extra_body={"top_k": 7, "chat_template_kwargs": {"enable_thinking": False}},
    )
    sent = one.engines["a"].requests[-1].body
    assert sent["model"] == "org/upstream-a"
    assert sent["top_k"] == 7
    assert sent["chat_template_kwargs"] == {"enable_thinking": False}
    assert sent["temperature"] == 0.3
    assert sent["messages"] == [{"role": "user", "content": "hello world"}]


def test_response_keeps_unknown_fields_usage_and_gets_client_model(one: Stack, client_for):
    resp = client_for(one).chat.completions.create(
        model="chat-m", messages=[{"role": "user", "content": "one two three"}]
    )
    assert resp.model == "chat-m"
    assert resp.model_extra["fake_engine"] == "a"  # an unknown field survived
    assert resp.system_fingerprint == "fake-a"
    # the fake engine's token rule: 3 words + 1 per message
    assert resp.usage.prompt_tokens == 4
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens


def test_tool_calls_pass_through(one: Stack, client_for):
    tools = [
        {
            "type": "function",
            "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
        }
    ]
    resp = client_for(one).chat.completions.create(
        model="chat-m", messages=[{"role": "user", "content": "weather?"}], tools=tools
    )
    call = resp.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert resp.choices[0].finish_reason == "tool_calls"
    assert one.engines["a"].requests[-1].body["tools"] == tools


def test_streaming_chunks_carry_client_model_and_arrive_whole(one: Stack, client_for):
    stream = client_for(one).chat.completions.create(
        model="chat-m",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("a says:")
    assert {c.model for c in chunks} == {"chat-m"}
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 8
    assert one.engines["a"].requests[-1].body["stream_options"] == {"include_usage": True}


async def test_async_client_and_streaming(one: Stack):
    client = openai.AsyncOpenAI(base_url=one.url + "/v1", api_key="x", max_retries=0)
    resp = await client.chat.completions.create(
        model="other-m", messages=[{"role": "user", "content": "hi"}]
    )
    assert resp.model == "other-m"
    stream = await client.chat.completions.create(
        model="other-m", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    models = [chunk.model async for chunk in stream]
    assert models and set(models) == {"other-m"}
    await client.close()


def test_completions_and_embeddings(one: Stack, client_for):
    client = client_for(one)
    comp = client.completions.create(model="chat-m", prompt="once upon a time", max_tokens=4)
    assert comp.model == "chat-m"
    assert comp.usage.completion_tokens == 4
    assert one.engines["a"].requests[-1].path == "/v1/completions"
    streamed = list(client.completions.create(model="chat-m", prompt="x", stream=True))
    assert streamed and all(c.model == "chat-m" for c in streamed)
    emb = client.embeddings.create(model="other-m", input=["alpha", "beta"])
    assert emb.model == "other-m"
    assert len(emb.data) == 2 and len(emb.data[0].embedding) == 8
    assert one.engines["b"].requests[-1].body["model"] == "org/upstream-b"


def test_catalog_lists_each_model_once_with_largest_window(one: Stack, client_for):
    models = {m.id: m for m in client_for(one).models.list()}
    assert set(models) == {"chat-m", "other-m"}
    assert models["chat-m"].model_extra["context_length"] == 4096
    assert models["other-m"].model_extra["context_length"] == 16384


def test_routing_headers(one: Stack, client_for):
    raw = client_for(one).chat.completions.with_raw_response.create(
        model="chat-m",
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"X-Request-Id": "req-abc.123"},
    )
    h = raw.headers
    assert h["x-request-id"] == "req-abc.123"
    assert h["x-fleetgate-route"] == "pa"
    assert h["x-fleetgate-provider"] == "pa"
    assert h["x-fleetgate-attempts"] == "1"
    assert h["x-fleetgate-fallback-count"] == "0"
    overhead = float(h["x-fleetgate-overhead-ms"])
    assert 0 <= overhead < 1000
    generated = (
        client_for(one)
        .chat.completions.with_raw_response.create(
            model="chat-m",
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"X-Request-Id": "bad id with spaces"},
        )
        .headers["x-request-id"]
    )
    assert generated != "bad id with spaces" and len(generated) == 24


def test_deployment_id_pins_one_host(one: Stack, client_for):
    resp = client_for(one).chat.completions.with_raw_response.create(
        model="pb-small", messages=[{"role": "user", "content": "hi"}]
    )
    assert resp.headers["x-fleetgate-route"] == "pb-small"
    assert resp.parse().model == "pb-small"
    assert one.engines["b"].requests[-1].body["model"] == "org/upstream-b"
