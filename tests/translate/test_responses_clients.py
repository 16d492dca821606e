"""OpenAI Responses clients on deployments that only speak Chat Completions."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import orjson
import pytest

from fleetgate.testing import Fault
from tests.harness import Stack, anthropic_provider, deployment
from tests.security.servers import Scripted

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


SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
# a request that sets every setting a `response` object repeats
SETTINGS: dict[str, Any] = {
    "instructions": "be brief",
    "max_output_tokens": 50,
    "temperature": 0.25,
    "top_p": 0.5,
    "metadata": {"run": "r7"},
    "parallel_tool_calls": False,
    "tools": [SHELL, {"type": "web_search"}],
    "tool_choice": {"type": "function", "name": "shell"},
    "text": {"format": {"type": "json_schema", "name": "thing", "schema": SCHEMA}},
    "reasoning": {"effort": "low"},
    "safety_identifier": "user-42",
    "prompt_cache_key": "pk-1",
    "top_logprobs": 3,
    "truncation": "auto",
    "store": False,
}


def _repeats_settings(resp: Any) -> None:
    assert (resp.instructions, resp.max_output_tokens) == ("be brief", 50)
    assert (resp.temperature, resp.top_p) == (0.25, 0.5)
    assert resp.metadata == {"run": "r7"} and resp.parallel_tool_calls is False
    assert [(t.type, t.name) for t in resp.tools] == [("function", "shell")]  # no web search
    assert (resp.tool_choice.type, resp.tool_choice.name) == ("function", "shell")
    assert (resp.text.format.type, resp.text.format.name) == ("json_schema", "thing")
    assert resp.text.format.schema_ == SCHEMA
    assert resp.reasoning.effort == "low"
    assert (resp.safety_identifier, resp.prompt_cache_key) == ("user-42", "pk-1")
    assert resp.top_logprobs == 3
    # what the translation did instead: nothing stored, no input cut to fit
    assert (resp.store, resp.truncation, resp.background) == (False, "disabled", False)


def test_the_response_repeats_the_request_settings(chat_only: Stack, client_for) -> None:
    client: openai.OpenAI = client_for(chat_only)
    _repeats_settings(client.responses.create(model="m", input="run ls", **SETTINGS))
    events = list(client.responses.create(model="m", input="run ls", stream=True, **SETTINGS))
    lifecycle = [
        e.response for e in events if e.type.startswith("response.") and hasattr(e, "response")
    ]
    assert [r.status for r in lifecycle] == ["in_progress", "in_progress", "completed"]
    for resp in lifecycle:
        _repeats_settings(resp)
    with client.responses.stream(model="m", input="run ls", **SETTINGS) as stream:
        _repeats_settings(stream.get_final_response())
    # a request that sets nothing: the protocol's defaults (sampling: the engine's own)
    plain = client.responses.create(model="m", input="hi")
    assert (plain.instructions, plain.max_output_tokens, plain.temperature) == (None, None, None)
    assert (plain.tools, plain.tool_choice, plain.parallel_tool_calls) == ([], "auto", True)
    assert (plain.metadata, plain.text.format.type, plain.top_logprobs) == ({}, "text", 0)
    assert (plain.store, plain.truncation, plain.reasoning.effort) == (False, "disabled", None)


def test_responses_on_anthropic_repeat_the_request_settings(stack: Stack, client_for) -> None:
    api = stack.anthropic("claude")
    stack.start_gateway(
        {
            "providers": [anthropic_provider("an", api)],
            "deployments": [deployment("claude", "an", upstream_model="claude-x")],
        }
    )
    client: openai.OpenAI = client_for(stack)
    ask = {k: v for k, v in SETTINGS.items() if k not in ("top_p", "reasoning", "top_logprobs")}
    resp = client.responses.create(model="claude", input="run ls", **ask)
    assert resp.instructions == "be brief" and resp.temperature == 0.25
    assert resp.metadata == {"run": "r7"} and [t.name for t in resp.tools] == ["shell"]
    with client.responses.stream(model="claude", input="run ls", **ask) as stream:
        final = stream.get_final_response()
    assert (final.max_output_tokens, final.safety_identifier) == (50, "user-42")
    assert final.text.format.type == "json_schema" and final.parallel_tool_calls is False


def test_logprobs_are_asked_of_chat_only_through_include(chat_only: Stack, client_for) -> None:
    client: openai.OpenAI = client_for(chat_only)
    engine = chat_only.engines["e"]
    include = ["message.output_text.logprobs"]
    client.responses.create(model="m", input="hi", include=include, top_logprobs=3)
    sent = engine.requests[-1].body
    assert (sent["logprobs"], sent["top_logprobs"]) == (True, 3)
    client.responses.create(model="m", input="hi", include=include)
    assert engine.requests[-1].body["logprobs"] is True
    assert "top_logprobs" not in engine.requests[-1].body
    # `top_logprobs` alone returns no logprobs (OpenAI's rule): chat is asked for none, and
    # an engine that refuses `top_logprobs` without `logprobs` is not sent it
    for top in (0, 3):
        resp = client.responses.create(model="m", input="hi", top_logprobs=top)
        assert resp.output[0].content[0].logprobs == [] and resp.top_logprobs == top
        assert not {"logprobs", "top_logprobs"} & engine.requests[-1].body.keys()


def test_top_logprobs_alone_needs_no_logprobs_support(stack: Stack, client_for) -> None:
    api = stack.anthropic("claude")  # an Anthropic deployment has no logprobs
    stack.start_gateway(
        {
            "providers": [anthropic_provider("an", api)],
            "deployments": [deployment("claude", "an", upstream_model="claude-x")],
        }
    )
    client: openai.OpenAI = client_for(stack)
    resp = client.responses.create(model="claude", input="hi", top_logprobs=0)
    assert resp.output_text.startswith("claude") and resp.top_logprobs == 0
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(
            model="claude", input="hi", include=["message.output_text.logprobs"]
        )
    assert "logprobs" in err.value.message


def test_a_stream_that_breaks_ends_failed_not_completed(chat_only: Stack, client_for) -> None:
    client: openai.OpenAI = client_for(chat_only)
    engine = chat_only.engines["e"]
    engine.fail_next(Fault("break_stream", after_chunks=3))
    events = list(client.responses.create(model="m", input="hi", stream=True))
    kinds = [e.type for e in events]
    assert "response.completed" not in kinds and kinds[-2:] == ["error", "response.failed"]
    assert events[-2].code == "stream_interrupted" and "retry" in events[-2].message
    failed = events[-1].response
    assert failed.status == "failed" and failed.error.code == "server_error"
    sent = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    (item,) = failed.output  # what had been produced, as unfinished
    assert item.status == "incomplete" and item.content[0].text == sent != ""
    assert [e.sequence_number for e in events] == list(range(len(events)))
    engine.fail_next(Fault("break_stream", after_chunks=3))
    with client.responses.stream(model="m", input="hi") as stream:
        assert [e.type for e in stream][-1] == "response.failed"
        with pytest.raises(RuntimeError, match=r"response\.completed"):
            stream.get_final_response()  # the SDK's word for an answer that never finished


def test_a_filtered_answer_is_incomplete_for_content_filter(stack: Stack, client_for) -> None:
    up = Scripted()
    stack.lt.run(up.start())
    try:
        stack.start_gateway(
            {
                "providers": [{"id": "sc", "kind": "sglang", "base_url": up.url + "/v1"}],
                "deployments": [deployment("m", "sc")],
            }
        )
        client: openai.OpenAI = client_for(stack)
        answer = {
            "id": "chatcmpl-f",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "I will not"},
                    "finish_reason": "content_filter",
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6},
        }
        up.answer = (200, {"Content-Type": "application/json"}, orjson.dumps(answer))
        resp = client.responses.create(model="m", input="hi")
        assert resp.status == "incomplete" and resp.output[0].status == "incomplete"
        assert resp.incomplete_details.reason == "content_filter"
        chunks = [
            {"choices": [{"index": 0, "delta": {"content": "I will not"}}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "content_filter"}]},
            {"choices": [], "usage": answer["usage"]},
        ]
        body = b"".join(
            b"data: " + orjson.dumps({"id": "chatcmpl-f", **c}) + b"\n\n" for c in chunks
        )
        up.answer = (200, {"Content-Type": "text/event-stream"}, body + b"data: [DONE]\n\n")
        events = list(client.responses.create(model="m", input="hi", stream=True))
        assert events[-1].type == "response.incomplete"
        assert events[-1].response.incomplete_details.reason == "content_filter"
        assert events[-1].response.output[0].content[0].text == "I will not"
    finally:
        stack.stop_gateway()
        stack.lt.run(up.stop())
