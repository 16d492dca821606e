"""Prompt tokens read from the provider's cache reach the attempt's span
(`gen_ai.usage.cache_read.input_tokens`) for streamed answers as for whole ones, from the
usage each protocol's stream ends with; checked on a real OTLP/gRPC receiver."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

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


@pytest.mark.parametrize("stream", [True, False])
def test_openai_cached_tokens_reach_the_span(
    stack: Stack, receiver: GrpcReceiver, stream: bool
) -> None:
    engine = stack.engine("a")
    engine.cached_tokens = 4
    stack.start_gateway(
        {
            "providers": [provider("pa", engine)],
            "deployments": [deployment("m", "pa", upstream_model="up")],
            "telemetry": telemetry(receiver),
        }
    )
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
    engine = stack.engine("a")
    stack.start_gateway(
        {
            "providers": [provider("pa", engine)],
            "deployments": [deployment("m", "pa", upstream_model="up")],
            "telemetry": telemetry(receiver),
        }
    )
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
