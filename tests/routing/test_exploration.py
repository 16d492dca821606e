"""`sort: throughput | latency` learns under sequential traffic: a deployment with no or a
stale measurement gets one request to measure it, then the faster one keeps the traffic."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import httpx
import pytest

from tests.harness import Stack, deployment, provider

MSG = [{"role": "user", "content": "hello"}]


def _slow_first(stack: Stack, **slow: Any) -> None:
    engines = {"slow": stack.engine("slow", **slow), "fast": stack.engine("fast")}
    stack.start_gateway(
        {
            "providers": [provider(n, e) for n, e in engines.items()],
            "deployments": [deployment("m", "slow"), deployment("m", "fast")],
        }
    )


def _send(stack: Stack, by: str, stream: bool) -> str:
    body = {"model": "m", "messages": MSG, "provider": {"sort": by}, "stream": stream}
    with httpx.stream("POST", stack.url + "/v1/chat/completions", json=body, timeout=10) as r:
        assert r.status_code == 200
        r.read()
        return r.headers["x-fleetgate-route"]


@pytest.mark.parametrize(
    ("by", "stream", "slow"),
    [
        ("throughput", True, {"tokens_per_second": 40, "reply_words": 8}),
        ("latency", False, {"latency": 0.15}),
    ],
)
def test_sequential_traffic_finds_the_faster_host(
    stack: Stack, by: str, stream: bool, slow: dict[str, Any]
) -> None:
    _slow_first(stack, **slow)
    routes = [_send(stack, by, stream) for _ in range(30)]
    # nothing known: no preference (the tie-breakers pick one); then the other, unmeasured
    # host is tried once; then the faster one keeps the traffic
    assert sorted(routes[:2]) == ["fast", "slow"], routes
    assert Counter(routes[2:]) == {"fast": 28}, routes


def test_a_stale_measurement_is_explored_once_per_period(stack: Stack) -> None:
    _slow_first(stack, latency=0.15)
    for _ in range(3):
        _send(stack, "latency", False)
    state = stack.gateway.pipeline.state
    long_ago = time.time() - 120  # past `stale_after_seconds` (60)
    state.health("slow").measured_at = state.health("slow").tried_at = long_ago
    plan = httpx.post(
        stack.url + "/v1/routing/explain",
        json={"model": "m", "messages": MSG, "provider": {"sort": "latency"}},
    ).json()
    assert plan["candidates"][0]["deployment"] == "slow"
    assert plan["notes"]["exploration"] == {"slow": "latency measured 120s ago"}
    routes = [_send(stack, "latency", False) for _ in range(5)]
    assert routes == ["slow", "fast", "fast", "fast", "fast"]  # one request re-measures it
