"""Defect 2: upstream redirects were followed, credentials and all. A 3xx from any upstream
call (proxy, discovery probe, tokenize) is now an upstream error that names the redirect,
counts against the deployment, and never reaches the host it points at."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import pytest

from fleetgate.config.schema import ContextConfig
from fleetgate.context.estimate import estimate_context_tokens
from tests.harness import Stack, wait_until
from tests.security.servers import Redirector

SECRET = "sk-live-do-not-leak-0123456789"
HEADER_SECRET = "hdr-secret-abcdef-987654"


@pytest.fixture
def redirector(stack: Stack) -> Iterator[Redirector]:
    target = stack.engine("target")  # records whatever reaches it
    r = Redirector(target.url)
    stack.lt.run(r.start())
    yield r
    stack.lt.run(r.stop())


def test_no_redirect_is_followed_on_proxy_tokenize_or_discovery(
    stack: Stack, redirector: Redirector
) -> None:
    common = {
        "base_url": redirector.url + "/v1",
        "api_key": SECRET,
        "headers": {"X-Upstream-Auth": HEADER_SECRET},
    }
    gw = stack.start_gateway(
        {
            "providers": [
                {"id": "small", "kind": "vllm", "discovery": True, **common},
                {"id": "big", "kind": "vllm", **common},
                {"id": "claude", "kind": "anthropic", **common},
            ],
            "deployments": [
                {"id": "small", "model": "m", "provider": "small", "context_window": 1200},
                {"id": "big", "model": "m", "provider": "big", "context_window": 4000},
                {"id": "claude", "model": "c", "provider": "claude"},
            ],
        }
    )
    wait_until(lambda: gw.pipeline.discovery.refreshes >= 1, 10, "a discovery round")
    # the output reserve puts the estimated band's centre on the 1200-token window, so the
    # band straddles it: the gateway asks the engine for an exact count first
    hi = [{"role": "user", "content": "hi"}]
    prompt = estimate_context_tokens({"messages": hi}, "chat.completions", ContextConfig())
    resp = httpx.post(
        stack.url + "/v1/chat/completions",
        json={"model": "m", "max_tokens": 1200 - prompt.prompt_tokens, "messages": hi},
        timeout=10,
    )
    assert resp.status_code == 502, resp.text
    err = resp.json()["error"]
    assert err["code"] == "upstream_error"
    assert "redirected to http://127.0.0.1" in err["message"]
    assert "never follows" in err["message"]

    with pytest.raises(anthropic.APIStatusError) as raised:
        anthropic.Anthropic(base_url=stack.url, api_key="x", max_retries=0).messages.create(
            model="c", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
        )
    assert raised.value.status_code == 502
    assert "redirect" in str(raised.value)

    hits = set(redirector.hits)
    assert {"/v1/models", "/tokenize", "/v1/chat/completions", "/v1/messages"} <= hits
    assert stack.engines["target"].requests == []  # nothing, and no secret, went on
    for dep in ("small", "big", "claude"):
        assert gw.pipeline.state.health(dep).failures >= 1  # counted against each deployment
    rid = resp.headers["x-request-id"]
    wait_until(lambda: gw.pipeline.recent.get(rid) is not None, 5, "the record")
    record = gw.pipeline.recent.get(rid)
    assert record is not None
    assert record.notes["context_refine"] == "failed"
    assert [a.error_class for a in record.attempts] == ["redirected", "redirected"]
    windows = httpx.get(stack.url + "/v1/fleet/windows", timeout=5).json()["data"]
    probed = next(w for w in windows if w["deployment"] == "small")
    assert "302" in str(probed)


@pytest.mark.parametrize(
    ("location", "named"),
    [
        ("http://127.0.0.1:99999", "http://127.0.0.1"),  # a port past 65535
        ("http://[::1", "elsewhere"),  # an IPv6 host never closed
        ("//Example.invalid", "//example.invalid"),  # the scheme of the request
        ("", "another path"),  # the Location is the request's own path
    ],
)
def test_a_redirect_to_no_url_at_all_is_an_upstream_error_and_falls_back(
    stack: Stack, location: str, named: str
) -> None:
    """A hostile upstream's Location need not parse as a URL: it is still a redirect,
    said so, and the request goes on to the next deployment."""
    bad = Redirector(location)
    stack.lt.run(bad.start())
    try:
        good = stack.engine("good")
        gw = stack.start_gateway(
            {
                "providers": [
                    {"id": "bad", "kind": "vllm", "base_url": bad.url + "/v1"},
                    {"id": "good", "kind": "vllm", "base_url": good.url + "/v1"},
                ],
                "deployments": [
                    {"id": "bad", "model": "m", "provider": "bad", "priority": 0},
                    {"id": "good", "model": "m", "provider": "good", "priority": 1},
                ],
            }
        )
        body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
        resp = httpx.post(stack.url + "/v1/chat/completions", json=body, timeout=10)
        assert resp.status_code == 200, resp.text
        assert resp.headers["x-fleetgate-route"] == "good"
        rid = resp.headers["x-request-id"]
        wait_until(lambda: gw.pipeline.recent.get(rid) is not None, 5, "the record")
        record = gw.pipeline.recent.get(rid)
        assert record is not None
        first = record.attempts[0]
        assert (first.deployment_id, first.error_class) == ("bad", "redirected")
        assert first.message is not None and f"redirected to {named};" in first.message
        assert bad.hits == ["/v1/chat/completions"]
    finally:
        stack.lt.run(bad.stop())
