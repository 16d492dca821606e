"""Prompt tokens read from the provider's cache reach the attempt's span
(`gen_ai.usage.cache_read.input_tokens`) for streamed answers as for whole ones, from the
usage each protocol's stream ends with (fake engines, and the real llama.cpp engine's own
prefix cache); checked on a real OTLP/gRPC receiver."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from tests.engines import LlamaFactory, llama_fleet
from tests.harness import Stack, anthropic_provider, deployment, provider, wait_until
from tests.telemetry.receivers import GrpcReceiver, attributes

CLIENT = 3
CACHED = "gen_ai.usage.cache_read.input_tokens"


@pytest.fixture
def receiver() -> Iterator[GrpcReceiver]:
    got = GrpcReceiver()
    yield got
    got.close()


def telemetry(receiver: GrpcReceiver) -> dict[str, Any]:
    return {
        "otlp": {"endpoint": receiver.endpoint, "protocol": "grpc"},
        "export_interval_seconds": 0.05,
    }


def client_span(receiver: GrpcReceiver, stream: bool) -> dict[str, Any]:
    def found() -> list[dict[str, Any]]:
        spans = [attributes(s.attributes) for s in receiver.spans() if s.kind == CLIENT]
        return [a for a in spans if a.get("gen_ai.request.stream") is stream]

    wait_until(lambda: bool(found()), 10, f"the {'streamed' if stream else 'whole'} attempt")
    (span,) = found()
    return span


def _traced_gateway(stack: Stack, receiver: GrpcReceiver, engine: Any) -> None:
    stack.start_gateway(
        {
            "providers": [provider("pa", engine)],
            "deployments": [deployment("m", "pa", upstream_model="up")],
            "telemetry": telemetry(receiver),
        }
    )


@pytest.mark.parametrize("stream", [True, False])
def test_openai_cached_tokens_reach_the_span(
    stack: Stack, receiver: GrpcReceiver, stream: bool
) -> None:
    engine = stack.engine("a")
    engine.cached_tokens = 4
    _traced_gateway(stack, receiver, engine)
    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key="x", max_retries=0, timeout=10)
    messages: Any = [{"role": "user", "content": "one two three four five six"}]
    if stream:
        chunks = list(
            client.chat.completions.create(
                model="m",
                messages=messages,
                max_tokens=3,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        usage = chunks[-1].usage
    else:
        usage = client.chat.completions.create(model="m", messages=messages, max_tokens=3).usage
    assert usage is not None and usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == 4
    span = client_span(receiver, stream)
    assert span[CACHED] == 4
    assert span["gen_ai.usage.input_tokens"] == usage.prompt_tokens  # the cached ones in it


def test_a_stream_without_cache_details_has_no_cache_attribute(
    stack: Stack, receiver: GrpcReceiver
) -> None:
    _traced_gateway(stack, receiver, stack.engine("a"))
    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key="x", max_retries=0, timeout=10)
    stream = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=3,
        stream=True,
        stream_options={"include_usage": True},
    )
    assert list(stream)
    span = client_span(receiver, True)
    assert CACHED not in span
    assert span["gen_ai.usage.output_tokens"] == 3


@pytest.mark.parametrize("stream", [True, False])
def test_anthropic_cache_reads_reach_the_span(
    stack: Stack, receiver: GrpcReceiver, stream: bool
) -> None:
    api = stack.anthropic("an")
    api.cache_read = 3
    stack.start_gateway(
        {
            "providers": [anthropic_provider("an", api)],
            "deployments": [deployment("claude", "an", upstream_model="claude-up")],
            "telemetry": telemetry(receiver),
        }
    )
    client = anthropic.Anthropic(base_url=stack.url, api_key="x", max_retries=0, timeout=10)
    messages: Any = [{"role": "user", "content": "one two three four five six"}]
    if stream:
        with client.messages.stream(model="claude", max_tokens=4, messages=messages) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(model="claude", max_tokens=4, messages=messages)
    assert message.usage.cache_read_input_tokens == 3
    span = client_span(receiver, stream)
    assert span[CACHED] == 3
    # the whole prompt: what was read from the cache and what was not
    assert span["gen_ai.usage.input_tokens"] == message.usage.input_tokens + 3
    assert span["gen_ai.usage.output_tokens"] == message.usage.output_tokens


def test_a_real_engine_s_prefix_cache_reaches_the_streamed_attempt_span(
    stack: Stack, receiver: GrpcReceiver, llama: LlamaFactory
) -> None:
    config = llama_fleet([llama()])
    config["telemetry"] = telemetry(receiver)
    stack.start_gateway(config)
    # a prompt of its own: the engine's cache holds its prefix after the first request
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "cache read trace check: alpha beta gamma"}],
        "max_tokens": 2,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    seen: dict[str, int] = {}  # each answer's id: the cached tokens its usage reported
    for _ in range(3):
        # read to the stream's end (the openai SDK closes on `[DONE]`, before llama.cpp
        # ends its stream, and the gateway reads the usage at that end)
        resp = httpx.post(f"{stack.url}/v1/chat/completions", json=body, timeout=30)
        events = [
            orjson.loads(line[6:]) for line in resp.text.splitlines() if line.startswith("data: {")
        ]
        usage = events[-1]["usage"]
        seen[events[-1]["id"]] = usage["prompt_tokens_details"]["cached_tokens"]
    # llama.cpp read the prompt's prefix from its cache after the first time
    assert max(seen.values()) > 0

    def spans() -> dict[str, dict[str, Any]]:
        found = [attributes(s.attributes) for s in receiver.spans() if s.kind == CLIENT]
        return {a["gen_ai.response.id"]: a for a in found}

    wait_until(lambda: len(spans()) == 3, 10, "the attempts' spans")
    assert {answer: span[CACHED] for answer, span in spans().items()} == seen
