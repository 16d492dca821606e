"""An upstream's cookies stayed in the gateway's client sessions: a `Set-Cookie` on one
client's answer went back upstream with every later request, whoever sent it (a session
cookie of a hosted provider, a balancer's sticky cookie). Upstream sessions keep no cookies
now, on the proxied path and on the gateway's own calls (tokenize, discovery) alike."""

from __future__ import annotations

import httpx
import pytest

from tests.harness import Stack, deployment, provider

CHAT = {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("stream", [False, True])
def test_a_cookie_an_upstream_sets_never_goes_back_upstream(stack: Stack, stream: bool) -> None:
    engine = stack.engine("a")
    engine.response_headers["Set-Cookie"] = "session=client-one-secret; Path=/"
    # by name, as a hosted provider is: aiohttp's jar keeps no cookie of an IP address
    by_name = engine.url.replace("127.0.0.1", "localhost") + "/v1"
    stack.start_gateway(
        {
            "providers": [provider("pa", engine, base_url=by_name)],
            "deployments": [deployment("m", "pa")],
        }
    )
    for key in ("sk-client-one", "sk-client-two", "sk-client-two"):
        resp = httpx.post(
            stack.url + "/v1/chat/completions",
            json={**CHAT, "stream": stream},
            headers={"Authorization": f"Bearer {key}"},
            timeout=10,
        )
        assert resp.status_code == 200, resp.text
        assert "set-cookie" not in resp.headers  # nor does it reach a client
    chats = [r for r in engine.requests if r.path == "/v1/chat/completions"]
    assert len(chats) == 3
    assert [{k.lower() for k in r.headers} & {"cookie"} for r in chats] == [set()] * 3
