"""OpenAI Responses clients on deployments that only speak Chat Completions."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.harness import Stack, deployment

SHELL = {
    "type": "function",
    "name": "shell",
    "description": "Run a command",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
}


@pytest.fixture
def chat_only(stack: Stack) -> Stack:
    engine = stack.engine("e", tool_calls=2)
    stack.start_gateway(
        {
            "providers": [{"id": "sg", "kind": "sglang", "base_url": engine.url + "/v1"}],
            "deployments": [deployment("m", "sg", upstream_model="up-m")],
        }
    )
    return stack


def test_responses_create_plain(chat_only: Stack, client_for) -> None:
    client: openai.OpenAI = client_for(chat_only)
    resp = client.responses.create(
        model="m", instructions="be brief", input="tell me", max_output_tokens=4
    )
    assert resp.model == "m" and resp.object == "response"
    assert resp.output_text == "e says: w1 w2 w3 w4"
    assert resp.status == "incomplete" and resp.incomplete_details.reason == "max_output_tokens"
    assert (resp.usage.input_tokens, resp.usage.output_tokens) == (6, 4)  # 4 words, 2 turns
    sent = chat_only.engines["e"].requests[-1]
    assert sent.path == "/v1/chat/completions"
    assert sent.body == {
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "tell me"},
        ],
        "max_tokens": 4,
        "model": "up-m",
    }
    whole = client.responses.create(model="m", input="hi")
    assert whole.status == "completed" and whole.output[0].type == "message"


def test_responses_streamed_and_the_stream_helper(chat_only: Stack, client_for) -> None:
    client: openai.OpenAI = client_for(chat_only)
    events = list(client.responses.create(model="m", input="hi", stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "e says: w1 w2 w3 w4 w5 w6 w7 w8"
    assert events[-1].response.usage.output_tokens == 8
    with client.responses.stream(model="m", input="hi") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == text
    assert final.id == events[0].response.id or final.id.startswith("resp_")


def test_responses_function_calls_plain_and_streamed(chat_only: Stack, client_for) -> None:
    client: openai.OpenAI = client_for(chat_only)
    resp = client.responses.create(model="m", input="run ls", tools=[SHELL], tool_choice="required")
    calls = [o for o in resp.output if o.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("shell", {"command": "a0"}),
        ("shell", {"command": "a1"}),
    ]
    assert calls[0].call_id != calls[1].call_id
    sent = chat_only.engines["e"].requests[-1].body
    assert sent["tool_choice"] == "required"
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "shell",
                "parameters": SHELL["parameters"],
                "description": "Run a command",
            },
        }
    ]
    with client.responses.stream(model="m", input="run ls", tools=[SHELL]) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert kinds.count("response.function_call_arguments.delta") == 4
    assert kinds.count("response.function_call_arguments.done") == 2
    got = [(o.name, json.loads(o.arguments)) for o in final.output if o.type == "function_call"]
    assert got == [("shell", {"command": "a0"}), ("shell", {"command": "a1"})]


def test_text_format_json_schema_becomes_response_format(chat_only: Stack, client_for) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    client_for(chat_only).responses.create(
        model="m",
        input="json please",
        text={"format": {"type": "json_schema", "name": "thing", "schema": schema, "strict": True}},
    )
    sent = chat_only.engines["e"].requests[-1].body
    assert sent["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "thing", "schema": schema, "strict": True},
    }


def test_state_is_refused_unless_native(chat_only: Stack) -> None:
    for extra in ({"previous_response_id": "resp_1"}, {"store": True}):
        resp = httpx.post(
            chat_only.url + "/v1/responses",
            timeout=5,
            json={"model": "m", "input": "hi", **extra},
        )
        assert resp.status_code == 400
        err = resp.json()["error"]
        assert err["code"] == "unsupported_endpoint"
        assert "no native /responses" in err["message"] and "previous_response_id" in err["message"]
    assert chat_only.engines["e"].requests == []


def test_codex_request_shape(chat_only: Stack, client_for) -> None:
    from pathlib import Path

    body = json.loads(
        (Path(__file__).parents[1] / "fixtures" / "agents" / "codex_responses.json").read_text()
    )
    raw = httpx.post(chat_only.url + "/v1/responses", timeout=10, json=body)
    assert raw.status_code == 200 and raw.headers["content-type"].startswith("text/event-stream")
    sent = chat_only.engines["e"].requests[-1].body
    roles = [m["role"] for m in sent["messages"]]
    assert roles == [
        "system",
        "system",
        "user",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "user",
    ]
    assert sent["messages"][4]["tool_calls"] == [
        {
            "id": "call_a",
            "type": "function",
            "function": {"name": "shell", "arguments": '{"command":["ls"]}'},
        },
        {
            "id": "call_b",
            "type": "function",
            "function": {"name": "shell", "arguments": '{"command":["cat","README.md"]}'},
        },
    ]
    assert sent["messages"][5] == {
        "role": "tool",
        "tool_call_id": "call_a",
        "content": "README.md\nsrc",
    }
    assert [t["function"]["name"] for t in sent["tools"]] == ["shell"]  # web_search dropped
    assert sent["parallel_tool_calls"] is False and sent["reasoning_effort"] == "medium"
    for dropped in ("store", "include", "prompt_cache_key", "instructions", "input"):
        assert dropped not in sent
