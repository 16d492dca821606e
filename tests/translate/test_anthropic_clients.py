"""Anthropic clients on OpenAI-compatible deployments, and OpenAI clients on Anthropic."""

from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest

from fleetgate.testing import Fault
from tests.harness import Stack, anthropic_provider, deployment, wait_until
from tests.security.servers import Scripted
from tests.translate.broken_streams import (
    SSE,
    TEXT,
    anthropic_stream_failing,
    chat_stream_failing,
    sse_events,
)

WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
CLOCK = {
    "name": "get_time",
    "input_schema": {"type": "object", "properties": {"zone": {"type": "string"}}},
}


def chat_provider(name: str, engine, kind: str = "sglang", **extra) -> dict:
    return {"id": name, "kind": kind, "base_url": engine.url + "/v1", **extra}


@pytest.fixture
def chat_only(stack: Stack) -> Stack:
    """One deployment that speaks only Chat Completions (sglang)."""
    engine = stack.engine("e", tool_calls=2)
    stack.start_gateway(
        {
            "providers": [chat_provider("sg", engine)],
            "deployments": [deployment("m", "sg", upstream_model="up-m")],
        }
    )
    return stack


def client(stack: Stack) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=stack.url, api_key="x", max_retries=0, timeout=10)


def test_messages_create_on_a_chat_deployment(chat_only: Stack) -> None:
    msg = client(chat_only).messages.create(
        model="m",
        max_tokens=5,
        system=[{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
        stop_sequences=["END"],
        extra_body={"temperature": 0.3, "top_k": 5},
        metadata={"user_id": "u-1"},
        messages=[{"role": "user", "content": "hello world"}],
    )
    assert msg.model == "m" and msg.type == "message" and msg.role == "assistant"
    assert msg.content[0].text == "e says: w1 w2 w3 w4 w5"
    assert msg.stop_reason == "max_tokens"
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (6, 5)
    sent = chat_only.engines["e"].requests[-1]
    assert sent.path == "/v1/chat/completions"
    assert sent.body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello world"},
    ]
    assert sent.body["model"] == "up-m" and sent.body["max_tokens"] == 5
    assert sent.body["stop"] == ["END"] and sent.body["top_k"] == 5
    assert sent.body["user"] == "u-1" and "cache_control" not in json.dumps(sent.body)


def test_messages_stream_on_a_chat_deployment(chat_only: Stack) -> None:
    with client(chat_only).messages.stream(
        model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        kinds = []
        for event in stream:
            kinds.append(event.type)
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_delta" in kinds and "message_delta" in kinds
    assert final.content[0].text == "e says: w1 w2 w3 w4 w5 w6 w7 w8"
    assert final.stop_reason == "end_turn" and final.model == "m"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (2, 8)
    sent = chat_only.engines["e"].requests[-1].body
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}


def test_tool_use_plain_and_streamed(chat_only: Stack) -> None:
    c = client(chat_only)
    msg = c.messages.create(
        model="m",
        max_tokens=64,
        tools=[WEATHER, CLOCK],
        tool_choice={"type": "any"},
        messages=[{"role": "user", "content": "weather and time?"}],
    )
    assert msg.stop_reason == "tool_use"
    uses = [b for b in msg.content if b.type == "tool_use"]
    assert [(u.name, u.input) for u in uses] == [
        ("get_weather", {"city": "a0"}),
        ("get_time", {"zone": "a1"}),
    ]
    sent = chat_only.engines["e"].requests[-1].body
    assert sent["tool_choice"] == "required"
    assert sent["tools"][0] == {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": WEATHER["input_schema"],
            "description": "Weather for a city",
        },
    }
    with c.messages.stream(
        model="m",
        max_tokens=64,
        tools=[WEATHER, CLOCK],
        messages=[{"role": "user", "content": "weather?"}],
    ) as stream:
        deltas = [e for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    assert {d.delta.type for d in deltas} == {"input_json_delta"}
    assert len(deltas) == 4  # two calls, arguments in two pieces each
    assert [(b.name, b.input) for b in final.content] == [
        ("get_weather", {"city": "a0"}),
        ("get_time", {"zone": "a1"}),
    ]
    assert final.stop_reason == "tool_use"


def test_tool_results_go_back_as_tool_messages(chat_only: Stack) -> None:
    client(chat_only).messages.create(
        model="m",
        max_tokens=16,
        tools=[WEATHER],
        tool_choice={"type": "none"},
        messages=[
            {"role": "user", "content": "weather in Oslo and Rome?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "get_weather",
                        "input": {"city": "Oslo"},
                    },
                    {
                        "type": "tool_use",
                        "id": "t2",
                        "name": "get_weather",
                        "input": {"city": "Rome"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "rain"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "t2",
                        "content": [{"type": "text", "text": "service down"}],
                        "is_error": True,
                    },
                    {"type": "text", "text": "and tomorrow?"},
                ],
            },
        ],
    )
    sent = chat_only.engines["e"].requests[-1].body
    assert sent["tool_choice"] == "none"
    assert sent["messages"][1] == {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [
            {
                "id": "t1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
            },
            {
                "id": "t2",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'},
            },
        ],
    }
    assert sent["messages"][2:] == [
        {"role": "tool", "tool_call_id": "t1", "content": "rain"},
        {"role": "tool", "tool_call_id": "t2", "content": "Error: service down"},
        {"role": "user", "content": "and tomorrow?"},
    ]


def test_errors_come_as_the_anthropic_sdk_classes(stack: Stack) -> None:
    engine = stack.engine("e", context_window=50, error_style="llamacpp")
    stack.start_gateway(
        {
            "providers": [chat_provider("sg", engine)],
            "deployments": [deployment("m", "sg")],
        }
    )
    c = client(stack)
    with pytest.raises(anthropic.BadRequestError) as err:
        c.messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "word " * 80}]
        )
    assert err.value.body["error"]["type"] == "invalid_request_error"
    assert err.value.body["error"]["message"].startswith(
        "prompt is too long: 81 tokens > 50 maximum"
    )
    with pytest.raises(anthropic.NotFoundError):
        c.messages.create(model="nope", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    engine.fail_next(Fault("status", status=429))
    with pytest.raises(anthropic.RateLimitError) as limited:
        c.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert limited.value.body["error"]["type"] == "rate_limit_error"


def test_gateway_overload_is_529_overloaded_error(stack: Stack) -> None:
    engine = stack.engine("e")
    stack.start_gateway(
        {
            "routing": {"circuit": {"failure_threshold": 1, "cooldown_seconds": 60}},
            "providers": [chat_provider("sg", engine)],
            "deployments": [deployment("m", "sg")],
        }
    )
    engine.fail_next(Fault("status", status=500))
    c = client(stack)
    with pytest.raises(anthropic.InternalServerError):
        c.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    with pytest.raises(anthropic.OverloadedError) as err:  # the circuit is open: no route
        c.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert err.value.status_code == 529 and err.value.body["error"]["type"] == "overloaded_error"


def test_openai_host_without_messages_is_learned_and_translated(stack: Stack) -> None:
    engine = stack.engine("e", missing_paths=("/v1/messages",))
    stack.start_gateway(
        {
            "providers": [chat_provider("oa", engine, kind="openai")],
            "deployments": [deployment("m", "oa")],
        }
    )
    c = client(stack)
    for _ in range(2):
        msg = c.messages.create(
            model="m", max_tokens=3, messages=[{"role": "user", "content": "x"}]
        )
        assert msg.content[0].text == "e says: w1 w2 w3"
    paths = [r.path for r in engine.requests]
    # the first call tried /v1/messages once; the second went straight to chat
    assert paths == ["/v1/messages", "/v1/chat/completions", "/v1/chat/completions"]


def test_provider_protocols_override_the_kind(stack: Stack) -> None:
    engine = stack.engine("e")
    stack.start_gateway(
        {
            "providers": [chat_provider("v", engine, kind="vllm", protocols=["openai"])],
            "deployments": [deployment("m", "v")],
        }
    )
    client(stack).messages.create(
        model="m", max_tokens=3, messages=[{"role": "user", "content": "x"}]
    )
    assert engine.requests[-1].path == "/v1/chat/completions"


# ---- OpenAI clients on an anthropic-kind provider ------------------------------------------


@pytest.fixture
def on_anthropic(stack: Stack) -> Stack:
    api = stack.anthropic("claude", tool_calls=2)
    stack.start_gateway(
        {
            "providers": [anthropic_provider("an", api)],
            "deployments": [deployment("m", "an", upstream_model="claude-x")],
        }
    )
    return stack


def test_openai_chat_on_an_anthropic_provider(on_anthropic: Stack, client_for) -> None:
    oc = client_for(on_anthropic)
    resp = oc.chat.completions.create(
        model="m",
        max_tokens=4,
        stop="END",
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hello there"},
        ],
    )
    assert resp.model == "m" and resp.choices[0].message.content == "claude says: w1 w2 w3 w4"
    assert resp.choices[0].finish_reason == "length"
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (5, 4)
    sent = on_anthropic.apis["claude"].requests[-1]
    assert sent.headers["x-api-key"] == "k" and sent.headers["anthropic-version"]
    assert sent.body == {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hello there"}]}],
        "system": "be brief",
        "max_tokens": 4,
        "stop_sequences": ["END"],
        "model": "claude-x",
    }
    chunks = list(
        oc.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    # no usage chunk unasked: every chunk has its choice (`chunk.choices[0]` holds)
    assert all(len(c.choices) == 1 and c.usage is None for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == "claude says: w1 w2 w3 w4 w5 w6 w7 w8"
    assert chunks[-1].choices[0].finish_reason == "stop"
    asked = list(
        oc.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert [len(c.choices) for c in asked] == [1] * (len(asked) - 1) + [0]
    assert asked[-1].usage is not None and asked[-1].usage.completion_tokens == 8


def _logged_attempt(stack: Stack, request_id: str) -> dict[str, object]:
    url = f"{stack.url}/v1/requests/{request_id}"
    wait_until(lambda: httpx.get(url).status_code == 200, 5, "the request is logged")
    attempt: dict[str, object] = httpx.get(url).json()["attempts"][0]
    return attempt


def test_anthropic_streams_log_their_input_tokens(on_anthropic: Stack, client_for) -> None:
    """A short stream arrives in one read, message_start to message_stop: the input count
    is message_start's, the output count message_delta's (which has only that)."""
    ask = [{"role": "user", "content": "one two three"}]  # 3 words + 1 message
    raw = client_for(on_anthropic).chat.completions.with_raw_response.create(
        model="m", messages=ask, max_tokens=4, stream=True
    )
    list(raw.parse())
    attempt = _logged_attempt(on_anthropic, raw.headers["x-request-id"])
    assert (attempt["prompt_tokens"], attempt["completion_tokens"]) == (4, 4)
    native = anthropic.Anthropic(base_url=on_anthropic.url, api_key="x", max_retries=0)
    answer = native.messages.with_raw_response.create(
        model="m", messages=ask, max_tokens=3, stream=True
    )
    list(answer.parse())
    attempt = _logged_attempt(on_anthropic, answer.headers["x-request-id"])
    assert (attempt["prompt_tokens"], attempt["completion_tokens"]) == (4, 3)


def test_openai_tools_on_an_anthropic_provider(on_anthropic: Stack, client_for) -> None:
    tools = [
        {
            "type": "function",
            "function": {"name": t["name"], "parameters": t["input_schema"]},
        }
        for t in (WEATHER, CLOCK)
    ]
    oc = client_for(on_anthropic)
    resp = oc.chat.completions.create(
        model="m", tools=tools, tool_choice="required", messages=[{"role": "user", "content": "?"}]
    )
    calls = resp.choices[0].message.tool_calls
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("get_weather", {"city": "a0"}),
        ("get_time", {"zone": "a1"}),
    ]
    assert resp.choices[0].finish_reason == "tool_calls"
    assert on_anthropic.apis["claude"].requests[-1].body["tool_choice"] == {"type": "any"}
    # the tool results go back as one user turn of tool_result blocks
    oc.chat.completions.create(
        model="m",
        messages=[
            {"role": "user", "content": "?"},
            resp.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": calls[0].id, "content": "rain"},
            {"role": "tool", "tool_call_id": calls[1].id, "content": "noon"},
        ],
    )
    turns = on_anthropic.apis["claude"].requests[-1].body["messages"]
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert [b["type"] for b in turns[2]["content"]] == ["tool_result", "tool_result"]
    stream = oc.chat.completions.create(
        model="m", tools=tools, messages=[{"role": "user", "content": "?"}], stream=True
    )
    args: dict[int, str] = {}
    for chunk in stream:
        for choice in chunk.choices:
            for call in choice.delta.tool_calls or ():
                args[call.index] = args.get(call.index, "") + (call.function.arguments or "")
    assert {i: json.loads(a) for i, a in args.items()} == {0: {"city": "a0"}, 1: {"zone": "a1"}}


def test_openai_errors_from_an_anthropic_provider(on_anthropic: Stack, client_for) -> None:
    on_anthropic.apis["claude"].context_window = 3
    with pytest.raises(openai.BadRequestError) as err:
        client_for(on_anthropic).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "one two three four"}]
        )
    assert "prompt is too long" in err.value.body["message"]
    raw = httpx.post(
        on_anthropic.url + "/v1/chat/completions",
        timeout=5,
        json={"model": "m", "messages": [{"role": "user", "content": "one two three"}]},
    ).json()
    assert set(raw) == {"error"} and set(raw["error"]) >= {"message", "type"}


ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
    "required": ["answer"],
    "additionalProperties": False,
}


def test_output_config_goes_to_chat_as_response_format(chat_only: Stack) -> None:
    msg = client(chat_only).messages.create(
        model="m",
        max_tokens=5,
        messages=[{"role": "user", "content": "yes or no?"}],
        output_config={"format": {"type": "json_schema", "schema": ANSWER_SCHEMA}, "effort": "max"},
    )
    assert msg.content[0].type == "text"
    sent = chat_only.engines["e"].requests[-1].body
    assert sent["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "response", "schema": ANSWER_SCHEMA, "strict": True},
    }
    assert sent["reasoning_effort"] == "high"  # chat's highest
    assert "output_config" not in sent


def test_json_outputs_on_an_anthropic_provider(on_anthropic: Stack, client_for) -> None:
    # an Anthropic client: passed through as it is (the kind gives JSON outputs)
    api = on_anthropic.apis["claude"]
    fmt = {"type": "json_schema", "schema": ANSWER_SCHEMA}
    client(on_anthropic).messages.create(
        model="m",
        max_tokens=5,
        messages=[{"role": "user", "content": "x"}],
        output_config={"format": fmt},
    )
    assert api.requests[-1].body["output_config"] == {"format": fmt}
    # an OpenAI client: its json_schema becomes output_config.format
    oc = client_for(on_anthropic)
    schema = {"type": "json_schema", "json_schema": {"name": "a", "schema": ANSWER_SCHEMA}}
    oc.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}], response_format=schema
    )
    assert api.requests[-1].body["output_config"] == {"format": fmt}
    # JSON without a schema has no Anthropic form: refused, naming why
    sent = len(api.requests)
    with pytest.raises(openai.APIStatusError) as err:
        oc.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "x"}],
            response_format={"type": "json_object"},
        )
    assert (err.value.status_code, err.value.body["code"]) == (400, "unsupported_endpoint")
    assert "json_object" in err.value.message and len(api.requests) == sent


# ---- Anthropic clients' own headers ---------------------------------------------------------


def test_anthropic_beta_reaches_a_native_anthropic_upstream(stack: Stack) -> None:
    """`anthropic-beta` turns beta features on (Anthropic rejects their fields without it):
    a native upstream gets the client's, in requests, streams and counts; a translated one
    speaks chat, which has no such header."""
    api = stack.anthropic("claude")
    engine = stack.engine("e")
    stack.start_gateway(
        {
            "providers": [anthropic_provider("an", api), chat_provider("sg", engine)],
            "deployments": [
                deployment("claude", "an", upstream_model="claude-x"),
                deployment("chat", "sg", upstream_model="up-m"),
            ],
        }
    )
    betas = ["context-management-2025-06-27", "interleaved-thinking-2025-05-14"]
    c = client(stack)
    hi = [{"role": "user", "content": "hi"}]
    c.beta.messages.create(model="claude", max_tokens=5, betas=betas, messages=hi)
    assert api.requests[-1].headers["anthropic-beta"] == ",".join(betas)
    with c.beta.messages.stream(model="claude", max_tokens=5, betas=betas, messages=hi) as s:
        assert s.get_final_message().content[0].text == "claude says: w1 w2 w3 w4 w5"
    assert api.requests[-1].body["stream"] and api.requests[-1].headers["anthropic-beta"]
    c.beta.messages.count_tokens(model="claude", betas=betas, messages=hi)
    assert api.requests[-1].path == "/v1/messages/count_tokens"
    # the SDK adds its own token-counting beta: what the client sent, as it sent it
    assert api.requests[-1].headers["anthropic-beta"].startswith(",".join(betas) + ",")
    # two header lines are one list, as Anthropic reads them
    resp = httpx.post(
        stack.url + "/v1/messages",
        headers=[("anthropic-beta", betas[0]), ("anthropic-beta", betas[1])],
        json={"model": "claude", "max_tokens": 5, "messages": hi},
    )
    assert resp.status_code == 200
    assert api.requests[-1].headers["anthropic-beta"] == ",".join(betas)
    c.beta.messages.create(model="chat", max_tokens=5, betas=betas, messages=hi)
    assert engine.requests[-1].path == "/v1/chat/completions"
    assert "anthropic-beta" not in {k.lower() for k in engine.requests[-1].headers}
    # no header, none invented
    c.messages.create(model="claude", max_tokens=5, messages=hi)
    assert "anthropic-beta" not in api.requests[-1].headers


# ---- streams that fail after output had started ---------------------------------------------

ANTHROPIC_HEADERS = {"x-api-key": "x", "anthropic-version": "2023-06-01"}
HI = [{"role": "user", "content": "hi"}]


def _ends_with_the_error(raw: bytes, err_type: str) -> str:
    """An Anthropic stream whose last event is its `error` (as Anthropic ends a failed
    one): no block stop, `message_delta` or `message_stop` after it. Its message."""
    events = sse_events(raw)
    names = [name for name, _ in events]
    assert names[0] == "message_start" and "content_block_delta" in names
    name, payload = events[-1]
    assert name == "error" and names.count("error") == 1, names
    assert payload["type"] == "error" and payload["error"]["type"] == err_type
    return str(payload["error"]["message"])


def test_a_broken_chat_stream_ends_an_anthropic_stream_with_its_error(chat_only: Stack) -> None:
    engine = chat_only.engines["e"]
    engine.fail_next(Fault("break_stream", after_chunks=3))
    with (
        pytest.raises(anthropic.APIStatusError, match="retry the request"),
        client(chat_only).messages.stream(model="m", max_tokens=64, messages=HI) as stream,
    ):
        list(stream.text_stream)
    engine.fail_next(Fault("break_stream", after_chunks=3))
    raw = httpx.post(
        chat_only.url + "/v1/messages",
        headers=ANTHROPIC_HEADERS,
        timeout=10,
        json={"model": "m", "max_tokens": 64, "stream": True, "messages": HI},
    )
    assert "retry the request" in _ends_with_the_error(raw.content, "api_error")


def test_a_chat_engines_error_event_ends_an_anthropic_stream(stack: Stack) -> None:
    """vLLM writes `[DONE]` after its in-stream error: the stream still ends failed."""
    up = Scripted()
    up.answer = (200, SSE, chat_stream_failing("engine overloaded", 503))
    stack.lt.run(up.start())
    try:
        stack.start_gateway(
            {
                "providers": [chat_provider("sg", up)],
                "deployments": [deployment("m", "sg")],
            }
        )
        with (
            pytest.raises(anthropic.APIStatusError, match="engine overloaded"),
            client(stack).messages.stream(model="m", max_tokens=64, messages=HI) as stream,
        ):
            assert "".join(stream.text_stream) == TEXT
        raw = httpx.post(
            stack.url + "/v1/messages",
            headers=ANTHROPIC_HEADERS,
            timeout=10,
            json={"model": "m", "max_tokens": 64, "stream": True, "messages": HI},
        )
        assert _ends_with_the_error(raw.content, "overloaded_error") == "engine overloaded"
    finally:
        stack.lt.run(up.stop())


def test_an_anthropic_error_event_ends_a_chat_stream_without_done(stack: Stack, client_for) -> None:
    """Chat streams end failed with the error event, as the gateway's own do: no usage
    chunk, no `[DONE]` (which a reader takes for the answer's normal end)."""
    up = Scripted()
    up.answer = (200, SSE, anthropic_stream_failing("overloaded_error", "Overloaded"))
    stack.lt.run(up.start())
    try:
        stack.start_gateway(
            {"providers": [anthropic_provider("an", up)], "deployments": [deployment("m", "an")]}
        )
        chunks = []
        with pytest.raises(openai.APIError, match="Overloaded"):
            for chunk in client_for(stack).chat.completions.create(
                model="m", messages=HI, stream=True
            ):
                chunks.append(chunk)
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == TEXT
        for options in ({}, {"stream_options": {"include_usage": True}}):
            raw = httpx.post(
                stack.url + "/v1/chat/completions",
                timeout=10,
                json={"model": "m", "messages": HI, "stream": True, **options},
            )
            events = sse_events(raw.content)
            *before, (_, last) = events
            assert last != "[DONE]" and last["error"]["type"] == "overloaded_error"
            assert last["error"]["message"] == "Overloaded"
            assert all(isinstance(p, dict) and "error" not in p for _, p in before)
            assert all(p["choices"] for _, p in before)  # no usage chunk either
    finally:
        stack.lt.run(up.stop())
