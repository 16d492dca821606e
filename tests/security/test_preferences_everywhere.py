"""Defect 8 (first half): the `provider` preferences object was validated on
/v1/chat/completions only, and silently accepted (and sent upstream) on /v1/messages and
/api/chat. One validator now runs on every protocol, and the preferences route there too."""

from __future__ import annotations

import httpx
import pytest

from tests.harness import Stack, deployment, provider

MSG = [{"role": "user", "content": "hi"}]
BODIES = {
    "/v1/chat/completions": {"model": "m", "messages": MSG},
    "/v1/messages": {"model": "m", "max_tokens": 5, "messages": MSG},
    "/v1/responses": {"model": "m", "input": "hi"},
    "/api/chat": {"model": "m", "messages": MSG, "stream": False},
    "/api/generate": {"model": "m", "prompt": "hi", "stream": False},
}


@pytest.fixture
def two(stack: Stack) -> Stack:
    a, b = stack.engine("a"), stack.engine("b")
    stack.start_gateway(
        {
            "providers": [provider("pa", a), provider("pb", b)],
            "deployments": [deployment("m", "pa"), deployment("m", "pb")],
        }
    )
    return stack


@pytest.mark.parametrize("path", sorted(BODIES))
def test_wrong_preferences_are_refused_in_the_protocols_shape(two: Stack, path: str) -> None:
    for bad, where in (
        ({"only": 5}, "provider.only"),
        ({"sort": "cheapest"}, "provider.sort.by"),
        ({"allow_fallbacks": "yes"}, "provider.allow_fallbacks"),
        ({"no_such": 1}, "provider.no_such"),
        ("pa", "provider"),
    ):
        resp = httpx.post(two.url + path, json={**BODIES[path], "provider": bad}, timeout=10)
        assert resp.status_code == 400, (path, bad, resp.text)
        body = resp.json()
        if path.startswith("/api/"):
            assert where in body["error"]
        elif path == "/v1/messages":
            assert body["type"] == "error" and where in body["error"]["message"]
        else:
            assert body["error"]["param"] == where
    assert not two.engines["a"].requests and not two.engines["b"].requests


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/responses", "/v1/chat/completions"])
def test_preferences_route_on_every_protocol_and_never_go_upstream(two: Stack, path: str) -> None:
    for only in ("pb", "pa"):
        resp = httpx.post(
            two.url + path, json={**BODIES[path], "provider": {"only": [only]}}, timeout=10
        )
        assert resp.status_code == 200, resp.text
        assert resp.headers["x-fleetgate-route"] == only
        sent = two.engines[only[1]].requests[-1].body
        assert "provider" not in sent
