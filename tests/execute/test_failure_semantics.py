"""What a failure costs a deployment, and what the client hears of it (one replica)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import openai
import pytest

from fleetgate.testing import Fault
from tests.harness import Stack, deployment, provider, wait_until

MSG = [{"role": "user", "content": "hello"}]


def _two_hosts(stack: Stack, *, kind: str = "vllm", **routing: Any) -> Stack:
    a, b = stack.engine("a"), stack.engine("b")
    timeouts = {"connect": 1, "first_byte": 0.5, "total": 10}
    config: dict[str, Any] = {
        "providers": [
            provider("pa", a, kind=kind, timeouts=timeouts),
            provider("pb", b, kind=kind, timeouts=timeouts),
        ],
        "deployments": [
            deployment("m", "pa", upstream_model="up-a"),
            deployment("m", "pb", priority=1, upstream_model="up-b"),
        ],
    }
    if routing:
        config["routing"] = {"circuit": routing}
    stack.start_gateway(config)
    return stack


def _openai(stack: Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.url + "/v1", api_key="x", max_retries=0, timeout=10)


# ---- 1. a 200 that is not JSON is an upstream failure --------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_200_that_is_not_json_falls_back_and_counts(stack: Stack, stream: bool) -> None:
    _two_hosts(stack)
    stack.engines["a"].fail_next(Fault("invalid_json", after_chunks=0))
    raw = _openai(stack).chat.completions.with_raw_response.create(
        model="m", messages=MSG, stream=stream
    )
    assert raw.headers["x-fleetgate-route"] == "pb"
    assert raw.headers["x-fleetgate-attempts"] == "2"
    if stream:
        chunks = list(raw.parse())
        assert {c.model for c in chunks} == {"m"}
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).startswith(
            "b says:"
        )
    else:
        assert raw.parse().model == "m"  # the client's name, not the upstream's
    health = stack.gateway.pipeline.state.health("pa")
    assert health.consecutive_failures == 1 and health.failures == 1


def test_an_event_that_is_not_json_after_output_is_continued_on_the_sibling(
    stack: Stack,
) -> None:
    _two_hosts(stack)
    stack.engines["a"].tokens_per_second = 50  # events one by one: the first is out first
    stack.engines["a"].fail_next(Fault("invalid_json", after_chunks=3))
    stream = _openai(stack).chat.completions.create(model="m", messages=MSG, stream=True)
    received = list(stream)
    assert all(c.model == "m" for c in received)
    text = "".join(c.choices[0].delta.content or "" for c in received if c.choices)
    assert text.startswith("a says: w1 w2b says:")  # three events, then the sibling's
    assert len(stack.engines["b"].requests) == 1
    wait_until(
        lambda: stack.gateway.pipeline.state.health("pa").consecutive_failures == 1, 5, "counted"
    )


# ---- 2. the cooldown starts when the failure is seen ----------------------------------------


def test_the_cooldown_runs_from_when_the_failure_is_seen(stack: Stack) -> None:
    """A cooldown shorter than the first-byte timeout still keeps a hung host out."""
    _two_hosts(stack, cooldown_seconds=0.4)  # < first_byte (0.5 s)
    stack.engines["a"].set_fault(Fault("hang"))
    client = _openai(stack)
    seen = time.time()
    assert (
        client.chat.completions.with_raw_response.create(model="m", messages=MSG).headers[
            "x-fleetgate-route"
        ]
        == "pb"
    )
    for _ in range(3):
        started = time.monotonic()
        raw = client.chat.completions.with_raw_response.create(model="m", messages=MSG)
        assert raw.headers["x-fleetgate-attempts"] == "1"  # 'pa' kept out
        assert time.monotonic() - started < 0.4
    assert len(stack.engines["a"].requests) == 1
    assert stack.gateway.pipeline.state.health("pa").open_until >= seen + 0.5 + 0.4 - 0.05


# ---- 3. a bad host costs at most 2 of 5 requests ---------------------------------------


@pytest.mark.parametrize(
    ("fault", "cost"),
    [(Fault("status", status=500), 2), (Fault("reset"), 2), (Fault("hang"), 1), (None, 1)],
    ids=["500", "reset", "hang", "refused"],
)
def test_a_bad_host_costs_at_most_two_of_five(stack: Stack, fault: Fault | None, cost: int):
    _two_hosts(stack)  # the documented circuit defaults
    a = stack.engines["a"]
    if fault is None:
        stack.lt.run(a.stop())
    else:
        a.set_fault(fault)
    client = _openai(stack)
    attempts = [
        client.chat.completions.with_raw_response.create(model="m", messages=MSG).headers[
            "x-fleetgate-attempts"
        ]
        for _ in range(5)
    ]
    assert attempts.count("2") == cost  # each fell back from 'pa' to 'pb'
    assert attempts.count("1") == 5 - cost
    assert stack.gateway.pipeline.state.health("pa").circuit == "open"


def _open_the_circuit_of_a(stack: Stack) -> tuple[Any, openai.OpenAI]:
    """Two failures open host a's circuit for 0.3 s; a is healthy again afterwards."""
    _two_hosts(stack, cooldown_seconds=0.3)
    a = stack.engines["a"]
    a.set_fault(Fault("status", status=500))
    client = _openai(stack)
    for _ in range(2):
        client.chat.completions.create(model="m", messages=MSG)
    assert stack.gateway.pipeline.state.health("pa").circuit == "open"
    a.set_fault(None)
    return a, client


def test_one_half_open_probe_among_concurrent_requests(stack: Stack) -> None:
    a, client = _open_the_circuit_of_a(stack)
    a.latency = 0.3  # the probe is slow: the others arrive while it is out
    wait_until(lambda: stack.gateway.pipeline.state.health("pa").circuit == "half-open", 5)
    before = len(a.requests)
    with ThreadPoolExecutor(16) as pool:
        routes = list(
            pool.map(
                lambda _: client.chat.completions.with_raw_response.create(
                    model="m", messages=MSG
                ).headers["x-fleetgate-route"],
                range(16),
            )
        )
    assert len(a.requests) - before == 1
    assert routes.count("pa") == 1 and routes.count("pb") == 15


def test_a_probe_answered_with_the_requests_own_fault_does_not_hold_the_host(
    stack: Stack,
) -> None:
    a, client = _open_the_circuit_of_a(stack)
    wait_until(lambda: stack.gateway.pipeline.state.health("pa").circuit == "half-open", 5)
    # the probe is a request the host refuses as the client's fault: the host is up
    a.fail_next(Fault("status", status=400))
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="m", messages=MSG)
    # so the next request probes it again, and its success closes the circuit
    raw = client.chat.completions.with_raw_response.create(model="m", messages=MSG)
    assert raw.headers["x-fleetgate-route"] == "pa"
    assert stack.gateway.pipeline.state.health("pa").circuit == "closed"


# ---- 4. a 503 is not a rate limit --------------------------------------------------------


def test_a_503_with_retry_after_is_an_outage_not_a_rate_limit(stack: Stack) -> None:
    _two_hosts(stack)
    for name in ("a", "b"):
        stack.engines[name].set_fault(Fault("status", status=503, retry_after=2))
    client = _openai(stack)
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model="m", messages=MSG)
    assert info.value.status_code == 502
    assert info.value.body["code"] == "upstream_error"
    assert info.value.response.headers["retry-after"] == "2"  # relayed from the upstreams
    # both cool down for 2 s: the next request is refused before any upstream call, and as
    # an outage (503 no_route), never as a rate limit (429), which the SDK would report
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model="m", messages=MSG)
    assert info.value.status_code == 503
    assert info.value.body["code"] == "no_route"
    assert 1 <= int(info.value.response.headers["retry-after"]) <= 2
    assert [len(stack.engines[n].requests) for n in "ab"] == [1, 1]


@pytest.mark.parametrize("value", [float("inf"), float("nan"), -5.0])
def test_a_retry_after_that_is_no_number_of_seconds_is_ignored(stack: Stack, value: float) -> None:
    """`Retry-After: inf` (or nan, or -5) is no delta-seconds: the failure is the plain 503
    it came with, and the client hears no wait the gateway cannot keep."""
    _two_hosts(stack)
    for name in ("a", "b"):
        stack.engines[name].set_fault(Fault("status", status=503, retry_after=value))
    with pytest.raises(openai.InternalServerError) as info:
        _openai(stack).chat.completions.create(model="m", messages=MSG)
    assert info.value.status_code == 502
    assert info.value.body["code"] == "upstream_error"
    assert "retry-after" not in info.value.response.headers
    assert [len(stack.engines[n].requests) for n in "ab"] == [1, 1]
    assert [stack.gateway.pipeline.state.health(d).failures for d in ("pa", "pb")] == [1, 1]


def test_a_relayed_retry_after_is_no_later_than_the_gateway_tries_again(stack: Stack) -> None:
    """An upstream asking for a day's wait: the deployments cool down for the configured
    most (20 s), and the client is told that, not the day."""
    _two_hosts(stack, max_cooldown_seconds=20)
    for name in ("a", "b"):
        stack.engines[name].set_fault(Fault("status", status=503, retry_after=86_400))
    client = _openai(stack)
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model="m", messages=MSG)
    assert info.value.body["code"] == "upstream_error"
    assert info.value.response.headers["retry-after"] == "20"
    with pytest.raises(openai.InternalServerError) as info:  # both cool down, for 20 s
        client.chat.completions.create(model="m", messages=MSG)
    assert info.value.body["code"] == "no_route"
    assert 19 <= int(info.value.response.headers["retry-after"]) <= 20


def test_no_route_says_when_an_open_circuit_ends(stack: Stack) -> None:
    _two_hosts(stack, cooldown_seconds=20)
    for name in ("a", "b"):
        stack.engines[name].set_fault(Fault("hang"))
    client = _openai(stack)
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="m", messages=MSG)
    assert info.value.body["code"] == "upstream_timeout"
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model="m", messages=MSG)
    assert info.value.body["code"] == "no_route"
    assert 19 <= int(info.value.response.headers["retry-after"]) <= 20


# ---- 5. Anthropic's 529 keeps its meaning ----------------------------------------------------


def _anthropic(stack: Stack) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=stack.url, api_key="x", max_retries=0, timeout=10)


def test_an_anthropic_upstreams_529_reaches_anthropic_clients_as_overloaded(stack: Stack):
    _two_hosts(stack, kind="anthropic")
    for name in ("a", "b"):
        stack.engines[name].set_fault(Fault("status", status=529))
    with pytest.raises(anthropic.OverloadedError) as info:
        _anthropic(stack).messages.create(model="m", max_tokens=8, messages=MSG)
    assert info.value.status_code == 529
    assert info.value.body["error"]["type"] == "overloaded_error"
    sent = stack.engines["a"].requests[-1]
    assert sent.path == "/v1/messages" and sent.headers["anthropic-version"]


def test_an_overloaded_first_stream_event_falls_back_then_reaches_the_client(stack: Stack):
    _two_hosts(stack, kind="anthropic")
    overloaded = Fault("stream_error_event", status=529, message="Overloaded")
    stack.engines["a"].fail_next(overloaded)
    with _anthropic(stack).messages.stream(model="m", max_tokens=4, messages=MSG) as stream:
        assert "".join(stream.text_stream).startswith("b says:")
    for name in ("a", "b"):
        stack.engines[name].fail_next(overloaded)
    with (
        pytest.raises(anthropic.OverloadedError),
        _anthropic(stack).messages.stream(model="m", max_tokens=4, messages=MSG) as stream,
    ):
        list(stream.text_stream)
    assert len(stack.engines["b"].requests) == 2
