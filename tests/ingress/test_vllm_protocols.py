"""Anthropic Messages and OpenAI Responses through the gateway to vLLM-style engines."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import orjson
import pytest

from fleetgate.testing import Fault
from tests.harness import Stack, deployment, provider

USER = [{"role": "user", "content": "hello there"}]  # 2 words + 1 message = 3 prompt tokens


@pytest.fixture
def fleet(stack: Stack) -> Stack:
    """`m` on vLLM hosts a (tried first) and b; `long` on a small and a large window."""
    a = stack.engine("a")
    b = stack.engine("b")
    small = stack.engine("small", context_window=4096)
    large = stack.engine("large", context_window=32768)
    stack.start_gateway(
        {
            "providers": [
                provider("pa", a),
                provider("pb", b),
                provider("ps", small),
                provider("pl", large),
            ],
            "deployments": [
                deployment("m", "pa", upstream_model="up-a", context_window=8192),
                deployment("m", "pb", upstream_model="up-b", context_window=8192, priority=1),
                deployment("long", "ps", upstream_model="up-s", context_window=4096),
                deployment("long", "pl", upstream_model="up-l", context_window=32768, priority=1),
            ],
        }
    )
    return stack


def _client(stack: Stack) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=stack.url, api_key="x", max_retries=0, timeout=10)


def _events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of every SSE event of a raw stream."""
    out = []
    for block in raw.split(b"\n\n"):
        if not block.strip():
            continue
        fields = dict(line.split(b": ", 1) for line in block.split(b"\n"))
        out.append((fields[b"event"].decode(), orjson.loads(fields[b"data"])))
    return out


def _models(data: Any) -> list[str]:
    """Every `model` value anywhere in a JSON value."""
    if isinstance(data, dict):
        own = [data["model"]] if isinstance(data.get("model"), str) else []
        return own + [m for v in data.values() for m in _models(v)]
    if isinstance(data, list):
        return [m for v in data for m in _models(v)]
    return []


def _inference(stack: Stack, name: str) -> list[Any]:
    """The Messages / Responses requests an engine received (not discovery or /tokenize)."""
    paths = ("/v1/messages", "/v1/responses")
    return [r for r in stack.engines[name].requests if r.path in paths]


def test_anthropic_sdk_reaches_vllm_with_names_rewritten_both_ways(fleet: Stack) -> None:
    client = _client(fleet)
    msg = client.messages.create(model="m", max_tokens=5, system="be brief", messages=USER)
    assert msg.model == "m"
    assert msg.content[0].text == "a says: w1 w2 w3 w4 w5"
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (5, 5)  # + 2 system words
    assert msg.stop_reason == "max_tokens"
    sent = _inference(fleet, "a")[-1]
    assert sent.path == "/v1/messages" and sent.body["model"] == "up-a"
    assert sent.body["system"] == "be brief"

    with client.messages.stream(model="m", max_tokens=64, messages=USER) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "a says: w1 w2 w3 w4 w5 w6 w7 w8"
    assert final.model == "m" and final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 8
    assert _inference(fleet, "a")[-1].body["model"] == "up-a"

    events = list(client.messages.create(model="m", max_tokens=3, messages=USER, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert kinds.count("content_block_delta") == 4  # the prefix + 3 words
    assert events[0].message.model == "m"
    assert not _inference(fleet, "b")


def test_responses_reach_vllm_with_names_rewritten_both_ways(fleet: Stack) -> None:
    resp = httpx.post(
        fleet.url + "/v1/responses",
        timeout=10,
        json={"model": "m", "input": "tell me", "instructions": "short", "max_output_tokens": 4},
    )
    assert resp.status_code == 200 and resp.headers["x-fleetgate-route"] == "pa"
    body = resp.json()
    assert body["model"] == "m" and body["status"] == "incomplete"
    assert body["output"][0]["content"][0]["text"] == "a says: w1 w2 w3 w4"
    assert body["usage"]["input_tokens"] == 3  # 2 input words + 1 instruction word
    sent = _inference(fleet, "a")[-1]
    assert sent.path == "/v1/responses" and sent.body["model"] == "up-a"

    raw = httpx.post(
        fleet.url + "/v1/responses",
        timeout=10,
        json={"model": "m", "input": [{"role": "user", "content": "hi"}], "stream": True},
    )
    assert raw.status_code == 200
    assert raw.headers["content-type"].startswith("text/event-stream")
    events = _events(raw.content)
    names = [name for name, _ in events]
    assert names[0] == "response.created" and names[-1] == "response.completed"
    assert all(data["type"] == name for name, data in events)
    deltas = "".join(d["delta"] for n, d in events if n == "response.output_text.delta")
    assert deltas == "a says: w1 w2 w3 w4 w5 w6 w7 w8"
    carried = [m for _, data in events for m in _models(data)]
    assert len(carried) >= 3 and set(carried) == {"m"}  # created, in_progress, completed
    assert b"up-a" not in raw.content
    assert events[-1][1]["response"]["usage"]["input_tokens"] == 2


def test_an_engine_answering_with_another_name_is_still_rewritten(stack: Stack) -> None:
    """vLLM answers with its first served name, not the alias asked for."""
    e = stack.engine("e", answer_model="org/Model-7B")
    stack.start_gateway(
        {
            "providers": [provider("pe", e)],
            "deployments": [deployment("m", "pe", upstream_model="alias")],
        }
    )
    client = _client(stack)
    assert client.messages.create(model="m", max_tokens=2, messages=USER).model == "m"
    with client.messages.stream(model="m", max_tokens=2, messages=USER) as stream:
        list(stream.text_stream)
        assert stream.get_final_message().model == "m"
    raw = httpx.post(
        stack.url + "/v1/messages",
        timeout=10,
        json={"model": "m", "max_tokens": 2, "messages": USER, "stream": True},
    )
    assert set(m for _, data in _events(raw.content) for m in _models(data)) == {"m"}
    for stream_flag in (False, True):
        raw = httpx.post(
            stack.url + "/v1/responses",
            timeout=10,
            json={"model": "m", "input": "hi", "stream": stream_flag},
        )
        assert b"org/Model-7B" not in raw.content, raw.content[:400]
    assert _inference(stack, "e")[-1].body["model"] == "alias"


@pytest.mark.parametrize(
    "fault", [Fault("reset"), Fault("break_stream", after_chunks=0)], ids=["reset", "no-event"]
)
def test_streams_fall_back_before_the_first_byte(fleet: Stack, fault: Fault) -> None:
    a = fleet.engines["a"]
    a.fail_next(fault)
    with _client(fleet).messages.stream(model="m", max_tokens=64, messages=USER) as stream:
        text = "".join(stream.text_stream)
        assert stream.get_final_message().model == "m"
    assert text.startswith("b says:")
    assert _inference(fleet, "b")[-1].body["model"] == "up-b"

    a.fail_next(fault)
    raw = httpx.post(
        fleet.url + "/v1/responses",
        timeout=10,
        json={"model": "m", "input": "hi", "stream": True},
    )
    assert raw.status_code == 200 and raw.headers["x-fleetgate-route"] == "pb"
    events = _events(raw.content)
    assert [n for n, _ in events][-1] == "response.completed"
    assert events[-1][1]["response"]["output"][0]["content"][0]["text"].startswith("b says:")
    assert b"up-b" not in raw.content
    assert len(_inference(fleet, "a")) == 2  # each request tried a once


def test_a_503_falls_back_on_both_protocols(fleet: Stack) -> None:
    a = fleet.engines["a"]
    a.fail_next(Fault("status", status=503), count=2)
    got = _client(fleet).messages.with_raw_response.create(model="m", max_tokens=3, messages=USER)
    assert got.headers["x-fleetgate-route"] == "pb"
    assert got.parse().content[0].text == "b says: w1 w2 w3" and got.parse().model == "m"
    resp = httpx.post(
        fleet.url + "/v1/responses", timeout=10, json={"model": "m", "input": "x", "stream": True}
    )
    assert resp.headers["x-fleetgate-route"] == "pb"
    assert _events(resp.content)[-1][1]["response"]["model"] == "m"
    assert [r.body["model"] for r in _inference(fleet, "b")] == ["up-b", "up-b"]

    # every host down: the client gets a gateway error in its own protocol's shape
    a.set_fault(Fault("status", status=503))
    fleet.engines["b"].set_fault(Fault("status", status=503))
    with pytest.raises(anthropic.APIStatusError) as err:
        _client(fleet).messages.create(model="m", max_tokens=3, messages=USER)
    assert err.value.status_code == 502
    assert err.value.response.headers["x-fleetgate-fallback-exhausted"] == "true"
    assert err.value.body["type"] == "error" and err.value.body["error"]["type"] == "api_error"
    assert "injected fault" in err.value.body["error"]["message"]
    resp = httpx.post(fleet.url + "/v1/responses", timeout=10, json={"model": "m", "input": "x"})
    assert resp.status_code == 502 and resp.json()["error"]["code"] == "upstream_error"


def test_context_error_in_the_clients_shape_when_no_larger_window(fleet: Stack) -> None:
    a = fleet.engines["a"]
    a.fail_next(Fault("context_error"))
    with pytest.raises(anthropic.BadRequestError) as err:
        _client(fleet).messages.create(model="m", max_tokens=3, messages=USER)
    body = err.value.body
    assert body["type"] == "error" and set(body["error"]) >= {"type", "message"}
    assert "maximum context length is 8192" in body["error"]["message"]

    a.fail_next(Fault("context_error"))
    resp = httpx.post(fleet.url + "/v1/responses", timeout=10, json={"model": "m", "input": "x"})
    assert resp.status_code == 400
    assert "maximum context length is 8192" in resp.json()["error"]["message"]
    assert not _inference(fleet, "b")  # b's window is no larger: never tried

    # a stream whose first event is the context error: same answer, before any output
    a.fail_next(Fault("stream_error_event"))
    resp = httpx.post(
        fleet.url + "/v1/responses", timeout=10, json={"model": "m", "input": "x", "stream": True}
    )
    assert resp.status_code == 400
    assert "maximum context length" in resp.json()["error"]["message"]
    a.fail_next(Fault("stream_error_event"))
    with (
        pytest.raises(anthropic.BadRequestError),
        _client(fleet).messages.stream(model="m", max_tokens=3, messages=USER) as stream,
    ):
        list(stream.text_stream)
    assert not _inference(fleet, "b")


def test_context_error_moves_to_a_larger_window(fleet: Stack) -> None:
    fleet.engines["small"].fail_next(Fault("context_error"), count=2)
    msg = _client(fleet).messages.create(model="long", max_tokens=3, messages=USER)
    assert msg.content[0].text.startswith("large says:") and msg.model == "long"
    resp = httpx.post(fleet.url + "/v1/responses", timeout=10, json={"model": "long", "input": "x"})
    assert resp.status_code == 200 and resp.headers["x-fleetgate-route"] == "pl"
    assert len(_inference(fleet, "small")) == 2  # each request tried the small window first
    assert [r.body["model"] for r in _inference(fleet, "large")] == ["up-l", "up-l"]
