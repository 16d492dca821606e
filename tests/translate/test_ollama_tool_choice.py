"""A forced `tool_choice` to an Ollama worker, which accepts it on its OpenAI and Anthropic
endpoints and ignores it: the knob is dropped for that worker and recorded, the tools are
still offered, unless the request requires its parameters."""

from __future__ import annotations

import anthropic
import httpx
import pytest

from tests.harness import Stack, deployment, ollama_provider, provider, wait_until

WEATHER = {
    "name": "get_weather",
    "description": "the weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
HI = [{"role": "user", "content": "hi"}]


def _record(stack: Stack, request_id: str) -> dict:
    def fetch() -> bool:
        return httpx.get(f"{stack.url}/v1/requests/{request_id}", timeout=5).status_code == 200

    wait_until(fetch, 5, "the request's record")
    return httpx.get(f"{stack.url}/v1/requests/{request_id}", timeout=5).json()


@pytest.fixture
def on_ollama(stack: Stack) -> Stack:
    worker = stack.ollama("w", "llama3.2")
    stack.start_gateway(
        {
            "providers": [ollama_provider("ow", worker)],
            "deployments": [deployment("m", "ow", upstream_model="llama3.2")],
        }
    )
    return stack


def test_a_forced_tool_choice_over_messages_is_dropped_and_recorded(on_ollama: Stack) -> None:
    claude = anthropic.Anthropic(base_url=on_ollama.url, api_key="x", max_retries=0, timeout=10)
    raw = claude.messages.with_raw_response.create(
        model="m",
        max_tokens=16,
        messages=HI,
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    assert raw.parse().content  # answered, not 400 unsupported_parameters
    worker = on_ollama.workers["w"]
    sent = worker.requests[-1]
    answered = [r for r in worker.requests if r.path == "/v1/messages"]
    assert sent.path == "/v1/messages"  # Ollama's own Anthropic endpoint
    assert "tool_choice" not in sent.body and sent.body["tools"][0]["name"] == "get_weather"
    record = _record(on_ollama, raw.headers["x-request-id"])
    assert record["attempts"][0]["dropped_params"] == ["tool_choice"]

    # the request that requires its parameters finds no host that honours the choice
    with pytest.raises(anthropic.BadRequestError) as err:
        claude.messages.create(
            model="m",
            max_tokens=16,
            messages=HI,
            tools=[WEATHER],
            tool_choice={"type": "any"},
            extra_body={"provider": {"require_parameters": True}},
        )
    assert "(each lacks: tool_choice)" in err.value.message
    assert [r for r in worker.requests if r.path == "/v1/messages"] == answered


def test_chat_completions_drop_it_too_and_an_engine_that_honours_it_keeps_it(
    stack: Stack,
) -> None:
    worker = stack.ollama("w", "llama3.2")
    engine = stack.engine("e")
    stack.start_gateway(
        {
            "providers": [ollama_provider("ow", worker), provider("ve", engine)],
            "deployments": [
                deployment("m", "ow", upstream_model="llama3.2"),
                deployment("v", "ve"),
            ],
        }
    )
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    body = {"messages": HI, "tools": tools, "tool_choice": "required", "max_tokens": 4}
    resp = httpx.post(stack.url + "/v1/chat/completions", json={**body, "model": "m"}, timeout=10)
    assert resp.status_code == 200, resp.text
    assert "tool_choice" not in worker.requests[-1].body
    resp = httpx.post(stack.url + "/v1/chat/completions", json={**body, "model": "v"}, timeout=10)
    assert resp.status_code == 200
    assert engine.requests[-1].body["tool_choice"] == "required"  # vLLM honours it
    plan = httpx.post(
        stack.url + "/v1/routing/explain", json={**body, "model": "m"}, timeout=10
    ).json()
    assert plan["candidates"][0]["drop_params"] == ["tool_choice"]
