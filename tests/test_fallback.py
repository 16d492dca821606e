"""The fallback chain: which failures move on, cooldowns, streams, exhausted chains."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from fleetgate.testing import Fault
from tests.harness import Stack, deployment, provider, wait_until

MSG = [{"role": "user", "content": "hello"}]


def two_hosts(stack: Stack, circuit: dict | None = None, timeouts: dict | None = None) -> Stack:
    a = stack.engine("a")
    b = stack.engine("b")
    extra = {"timeouts": timeouts} if timeouts else {}
    config = {
        "providers": [provider("pa", a, **extra), provider("pb", b, **extra)],
        "deployments": [
            deployment("m", "pa", priority=0, upstream_model="up"),
            deployment("m", "pb", priority=1, upstream_model="up"),
        ],
    }
    if circuit:
        config["routing"] = {"circuit": circuit}
    stack.start_gateway(config)
    return stack


@pytest.mark.parametrize(
    "fault",
    [
        Fault("status", status=503),
        Fault("status", status=500),
        Fault("status", status=429, retry_after=30),
        Fault("reset"),
    ],
    ids=["503", "500", "429", "reset"],
)
def test_retryable_failures_move_to_next_candidate(stack: Stack, client_for, fault: Fault):
    two_hosts(stack)
    stack.engines["a"].fail_next(fault)
    raw = client_for(stack).chat.completions.with_raw_response.create(model="m", messages=MSG)
    assert raw.status_code == 200
    assert raw.headers["x-fleetgate-route"] == "pb"
    assert raw.headers["x-fleetgate-attempts"] == "2"
    assert raw.headers["x-fleetgate-fallback-count"] == "1"
    assert raw.parse().model == "m"
    assert len(stack.engines["b"].requests) == 1


def test_timeout_moves_on(stack: Stack, client_for):
    two_hosts(stack, timeouts={"connect": 1, "first_byte": 0.3, "total": 5})
    stack.engines["a"].fail_next(Fault("hang"))
    started = time.monotonic()
    raw = client_for(stack).chat.completions.with_raw_response.create(model="m", messages=MSG)
    assert raw.headers["x-fleetgate-route"] == "pb"
    assert time.monotonic() - started < 3
    wait_until(lambda: stack.engines["a"].cancelled == 1, 5, "hung upstream request cancelled")


def test_plain_400_returns_at_once_with_upstream_message(stack: Stack, client_for):
    two_hosts(stack)
    stack.engines["a"].fail_next(Fault("bad_request"))
    with pytest.raises(openai.BadRequestError) as info:
        client_for(stack).chat.completions.create(model="m", messages=MSG)
    assert "invalid parameter" in str(info.value)
    assert info.value.response.headers["x-fleetgate-attempts"] == "1"
    assert stack.engines["b"].requests == []


def test_429_retry_after_cools_the_deployment_down(stack: Stack, client_for):
    two_hosts(stack)
    stack.engines["a"].fail_next(Fault("status", status=429, retry_after=60))
    client = client_for(stack)
    client.chat.completions.create(model="m", messages=MSG)
    before = len(stack.engines["a"].requests)
    for _ in range(3):
        raw = client.chat.completions.with_raw_response.create(model="m", messages=MSG)
        assert raw.headers["x-fleetgate-route"] == "pb"
        assert raw.headers["x-fleetgate-attempts"] == "1"
    assert len(stack.engines["a"].requests) == before  # not even tried while cooling down
    health = stack.gateway.pipeline.state.health("pa")
    assert 55 < health.open_until - time.time() <= 60


def test_circuit_opens_then_half_open_probe_recovers(stack: Stack, client_for):
    two_hosts(stack, circuit={"failure_threshold": 2, "cooldown_seconds": 0.5})
    a = stack.engines["a"]
    a.set_fault(Fault("status", status=503))
    client = client_for(stack)
    for _ in range(2):
        client.chat.completions.create(model="m", messages=MSG)
    assert len(a.requests) == 2
    assert stack.gateway.pipeline.state.health("pa").circuit == "open"
    raw = client.chat.completions.with_raw_response.create(model="m", messages=MSG)
    assert raw.headers["x-fleetgate-attempts"] == "1"  # open circuit: 'pa' filtered out
    assert len(a.requests) == 2
    a.set_fault(None)
    wait_until(lambda: stack.gateway.pipeline.state.health("pa").circuit == "half-open", 5)
    raw = client.chat.completions.with_raw_response.create(model="m", messages=MSG)
    assert raw.headers["x-fleetgate-route"] == "pa"  # the probe succeeded
    assert stack.gateway.pipeline.state.health("pa").circuit == "closed"


def test_failed_probe_reopens_the_circuit(stack: Stack, client_for):
    two_hosts(stack, circuit={"failure_threshold": 1, "cooldown_seconds": 0.3})
    a = stack.engines["a"]
    a.set_fault(Fault("status", status=500))
    client = client_for(stack)
    client.chat.completions.create(model="m", messages=MSG)
    wait_until(lambda: stack.gateway.pipeline.state.health("pa").circuit == "half-open", 5)
    client.chat.completions.create(model="m", messages=MSG)  # the probe fails
    assert len(a.requests) == 2
    assert stack.gateway.pipeline.state.health("pa").circuit == "open"


def test_stream_falls_back_before_first_byte(stack: Stack, client_for):
    two_hosts(stack)
    stack.engines["a"].fail_next(Fault("status", status=503))
    raw = client_for(stack).chat.completions.with_raw_response.create(
        model="m", messages=MSG, stream=True
    )
    assert raw.headers["x-fleetgate-route"] == "pb"
    chunks = list(raw.parse())
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).startswith(
        "b says:"
    )


def test_in_stream_context_error_is_returned_as_a_400(stack: Stack, client_for):
    """A 200 stream whose first event is an error is not passed on as a success."""
    two_hosts(stack)
    stack.engines["a"].error_style = "openai"
    stack.engines["a"].fail_next(Fault("stream_error_event"))
    with pytest.raises(openai.BadRequestError) as info:
        client_for(stack).chat.completions.create(model="m", messages=MSG, stream=True)
    assert "maximum context length" in str(info.value)
    assert stack.engines["b"].requests == []  # no larger window to fall through to


def test_stream_broken_after_first_byte_ends_with_error_event(stack: Stack, client_for):
    a, b = stack.engine("a"), stack.engine("b")
    stack.start_gateway(  # a hosted OpenAI API cannot continue an answer: no continuation
        {
            "providers": [provider("pa", a), provider("pb", b, kind="openai")],
            "deployments": [
                deployment("m", "pa", priority=0, upstream_model="up"),
                deployment("m", "pb", priority=1, upstream_model="up"),
            ],
        }
    )
    a.fail_next(Fault("break_stream", after_chunks=3))
    stream = client_for(stack).chat.completions.create(model="m", messages=MSG, stream=True)
    received = []
    with pytest.raises(openai.APIError) as info:
        for chunk in stream:
            received.append(chunk)
    assert len(received) == 3
    assert "stream broke" in str(info.value)
    assert b.requests == []  # no fallback once output started


def test_exhausted_chain_names_every_failure(stack: Stack, client_for):
    two_hosts(stack)
    stack.engines["a"].set_fault(Fault("status", status=503))
    stack.engines["b"].set_fault(Fault("status", status=500))
    with pytest.raises(openai.APIStatusError) as info:
        client_for(stack).chat.completions.create(model="m", messages=MSG)
    err = info.value
    assert err.status_code == 502
    assert err.body["code"] == "upstream_error"
    assert "pa: 503" in err.body["message"] and "pb: 500" in err.body["message"]
    assert err.response.headers["x-fleetgate-fallback-exhausted"] == "true"
    assert err.response.headers["x-fleetgate-attempts"] == "2"


def test_all_rate_limited_gives_429_with_soonest_retry(stack: Stack, client_for):
    two_hosts(stack)
    stack.engines["a"].fail_next(Fault("status", status=429, retry_after=40))
    stack.engines["b"].fail_next(Fault("status", status=429, retry_after=7))
    with pytest.raises(openai.RateLimitError) as info:
        client_for(stack).chat.completions.create(model="m", messages=MSG)
    err = info.value
    assert err.body["code"] == "all_routes_rate_limited"
    assert 6 <= int(err.response.headers["retry-after"]) <= 8


def test_all_timeouts_give_504(stack: Stack, client_for):
    two_hosts(stack, timeouts={"connect": 1, "first_byte": 0.2, "total": 5})
    for name in ("a", "b"):
        stack.engines[name].fail_next(Fault("hang"))
    with pytest.raises(openai.APIStatusError) as info:
        client_for(stack).chat.completions.create(model="m", messages=MSG)
    assert info.value.status_code == 504
    assert info.value.body["code"] == "upstream_timeout"


def test_unreachable_hosts_give_502(stack: Stack, client_for):
    two_hosts(stack)
    for name in ("a", "b"):
        stack.lt.run(stack.engines[name].stop())
    with pytest.raises(openai.APIStatusError) as info:
        client_for(stack).chat.completions.create(model="m", messages=MSG)
    assert info.value.status_code == 502
    assert info.value.body["code"] == "upstream_unreachable"


def test_client_disconnect_cancels_upstream(stack: Stack):
    two_hosts(stack)
    a = stack.engines["a"]
    a.fail_next(Fault("hang"))
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            stack.url + "/v1/chat/completions", json={"model": "m", "messages": MSG}, timeout=0.5
        )
    wait_until(lambda: a.cancelled == 1, 5, "upstream request cancelled")
    wait_until(
        lambda: stack.gateway.pipeline.state.health("pa").inflight == 0, 5, "in-flight released"
    )


def test_client_disconnect_mid_stream_cancels_upstream(stack: Stack):
    two_hosts(stack)
    a = stack.engines["a"]
    a.tokens_per_second = 20  # a slow stream
    a.reply_words = 200
    with httpx.stream(
        "POST",
        stack.url + "/v1/chat/completions",
        json={"model": "m", "messages": MSG, "stream": True},
        timeout=5,
    ) as r:
        for line in r.iter_lines():
            if line.startswith("data:"):
                break
    wait_until(lambda: a.cancelled == 1, 5, "upstream stream cancelled")
    wait_until(
        lambda: stack.gateway.pipeline.state.health("pa").inflight == 0, 5, "in-flight released"
    )
