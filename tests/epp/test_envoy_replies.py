"""Envoy's own answers behind the picker (no picker, no reachable endpoint, a timeout) reach
each client in its protocol's shape, with the code and status the proxy gives the same
failure; the picker's own refusals pass unchanged."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from tests.epp.stack import EppStack
from tests.harness import Stack, deployment, ollama_provider, provider

HI = [{"role": "user", "content": "hi"}]


def _openai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=20)


def _anthropic(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=20)


def _fleet(stack: Stack, **timeouts: float) -> dict[str, Any]:
    """`m` on a vLLM engine, `llama3.2` on an Ollama worker."""
    engine, worker = stack.engine("a"), stack.ollama("w")
    return {
        "providers": [
            provider("a", engine, timeouts={"total": 30, **timeouts}),
            ollama_provider("w", worker),
        ],
        "deployments": [deployment("m", "a"), deployment("llama3.2", "w")],
    }


def test_no_endpoint_reachable_is_upstream_unreachable_in_each_shape(stack: Stack, epp: EppStack):
    envoy = epp.start(_fleet(stack))
    stack.lt.run(stack.engines["a"].stop())  # its port now refuses connections
    stack.lt.run(stack.workers["w"].stop())
    with pytest.raises(openai.InternalServerError) as caught:
        _openai(envoy.url).chat.completions.create(model="m", messages=HI)
    assert caught.value.status_code == 502
    assert caught.value.code == "upstream_unreachable"
    assert "could be connected to" in caught.value.message
    assert caught.value.response.headers["x-request-id"]

    with pytest.raises(anthropic.InternalServerError) as refused:
        _anthropic(envoy.url).messages.create(model="m", max_tokens=8, messages=HI)
    assert refused.value.status_code == 502
    body = refused.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "api_error"

    answer = httpx.post(envoy.url + "/api/chat", json={"model": "llama3.2", "messages": HI})
    assert answer.status_code == 502
    assert answer.headers["content-type"] == "application/json"
    assert "could be connected to" in answer.json()["error"]


def test_an_endpoint_past_its_timeout_is_upstream_timeout(stack: Stack, epp: EppStack):
    envoy = epp.start(_fleet(stack, total=0.5))
    stack.engines["a"].latency = 3.0
    started = time.monotonic()
    with pytest.raises(openai.APIStatusError) as caught:
        _openai(envoy.url).chat.completions.create(model="m", messages=HI)
    assert caught.value.status_code == 504
    assert caught.value.code == "upstream_timeout"
    assert time.monotonic() - started < 2.5  # the provider's timeout, not the engine's answer


def test_a_dead_picker_is_picker_unavailable_in_each_shape(stack: Stack, epp: EppStack):
    envoy = epp.start(_fleet(stack))
    epp.stop_picker()
    with pytest.raises(openai.InternalServerError) as caught:
        _openai(envoy.url).chat.completions.create(model="m", messages=HI)
    assert caught.value.status_code == 503
    assert caught.value.code == "picker_unavailable"
    # Anthropic's clients get its overloaded status, as the proxy's 503s give them
    with pytest.raises(anthropic.APIStatusError) as refused:
        _anthropic(envoy.url).messages.create(model="m", max_tokens=8, messages=HI)
    assert refused.value.status_code == 529
    assert isinstance(refused.value.body, dict)
    assert refused.value.body["error"]["type"] == "overloaded_error"


def test_a_picker_that_stops_answering_fails_closed_within_its_message_timeout(
    stack: Stack, epp: EppStack
):
    """A picker alive but stalled (its loop held: a long pause, a starved CPU), behind the
    bootstrap's default body mode. Envoy's message timeout is the exact count's budget plus
    half a second. (In FULL_DUPLEX_STREAMED mode Envoy applies no message timeout: such a
    request waits for the picker, docs/kubernetes.md.)"""
    config = _fleet(stack)
    config["routing"] = {"context": {"refine": {"timeout_seconds": 0.2}}}
    envoy = epp.start(config)
    client = _openai(envoy.url)
    assert client.chat.completions.create(model="m", messages=HI).choices
    stall = 3.0
    _stall(stack, stall)
    started = time.monotonic()
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="m", messages=HI)
    waited = time.monotonic() - started
    assert caught.value.status_code == 503
    assert caught.value.code == "picker_unavailable"
    assert waited < stall - 1.0  # Envoy's timeout answered, not the picker once it woke


def _stall(stack: Stack, seconds: float) -> None:
    """Holds the picker's loop for `seconds` (a long pause, a starved CPU), and returns once
    it is held: a request sent before the loop ran the pause could be read in the same loop
    turn, ahead of it, and answered."""
    held = threading.Event()

    def pause() -> None:
        held.set()
        time.sleep(seconds)

    stack.lt.loop.call_soon_threadsafe(pause)
    assert held.wait(10), "the picker's loop did not take the pause"


def _post_in_two_parts(url: str, between: Callable[[], None]) -> tuple[int, bytes]:
    """A chat request whose body leaves in two parts, `between` called after the first (a
    client's pause, the picker's stall): the answer's status and body."""
    body = orjson.dumps({"model": "m", "messages": HI})
    half = len(body) // 2
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=20)
    try:
        conn.putrequest("POST", "/v1/chat/completions")
        conn.putheader("content-type", "application/json")
        conn.putheader("content-length", str(len(body)))
        conn.endheaders(body[:half])
        between()
        conn.send(body[half:])
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_a_client_slow_with_its_body_is_not_taken_for_a_stalled_picker(stack: Stack, epp: EppStack):
    """In the default (STREAMED) mode Envoy times the picker's answer from the headers on,
    and again from each part of the body it sends: a client that pauses within its body
    longer than that timeout (here 1.5 s against 0.7 s) would get `picker_unavailable`
    from a live picker. After each part but the last, the picker asks Envoy to wait."""
    config = _fleet(stack)
    config["routing"] = {"context": {"refine": {"timeout_seconds": 0.2}}}
    envoy = epp.start(config)
    # the client's own pause (what is tested), nothing waited for
    status, answer = _post_in_two_parts(envoy.url, lambda: time.sleep(1.5))
    assert status == 200, answer
    assert orjson.loads(answer)["choices"][0]["message"]["content"]


def test_a_picker_that_stops_answering_mid_body_fails_closed_all_the_same(
    stack: Stack, epp: EppStack
):
    """The picker's request to wait for the next part (above) lasts until that part comes:
    Envoy times the next part's answer afresh, so a picker stalled meanwhile ends the
    request within the message timeout, not the body timeout."""
    config = _fleet(stack)
    config["routing"] = {"context": {"refine": {"timeout_seconds": 0.2}}}
    envoy = epp.start(config)
    stall = 3.0
    started: list[float] = []

    def stop_the_picker() -> None:
        _stall(stack, stall)
        started.append(time.monotonic())

    status, answer = _post_in_two_parts(envoy.url, stop_the_picker)
    assert status == 503
    assert orjson.loads(answer)["error"]["code"] == "picker_unavailable"
    assert time.monotonic() - started[0] < stall - 1.0  # Envoy's timeout, not the picker's


def test_the_picker_s_refusals_pass_unchanged(stack: Stack, epp: EppStack):
    envoy = epp.start(_fleet(stack))
    with pytest.raises(openai.NotFoundError) as caught:
        _openai(envoy.url).chat.completions.create(model="nope", messages=HI)
    assert caught.value.code == "model_not_found"
    assert "GET /v1/models" in caught.value.message


@pytest.mark.parametrize(
    ("mode", "limit", "size", "by"),
    [
        # the picker refuses it, as the proxy does
        ("BUFFERED", 65536, 200_000, "65536-byte limit"),
        ("STREAMED", 65536, 200_000, "65536-byte limit"),
        # buffered, Envoy refuses a body over what it holds
        ("BUFFERED", 1_500_000, 2_000_000, "server.max_body_bytes"),
        # streamed, the picker refuses it once its parts pass the limit, before Envoy's
        # buffer is full (Envoy then stops reading the rest)
        ("STREAMED", 1_500_000, 2_000_000, "1500000-byte limit"),
    ],
)
def test_a_body_over_the_limit_is_payload_too_large(
    stack: Stack, epp: EppStack, mode: str, limit: int, size: int, by: str
):
    """A body over `server.max_body_bytes`: buffered, Envoy refuses one over what it holds
    (the limit, or its own 1 MiB when larger), the picker any other; streamed, the
    picker refuses each."""
    config = _fleet(stack)
    config["server"] = {"max_body_bytes": limit}
    envoy = epp.start(config, body_mode=mode)
    big = [{"role": "user", "content": "w" * size}]
    with pytest.raises(openai.APIStatusError) as caught:
        _openai(envoy.url).chat.completions.create(model="m", messages=big)
    assert caught.value.status_code == 413
    assert caught.value.code == "payload_too_large"
    assert by in caught.value.message
    assert not stack.engines["a"].requests  # no engine was asked
    assert _openai(envoy.url).chat.completions.create(model="m", messages=HI).choices
