from __future__ import annotations

from tests.harness import Stack, deployment, provider


def test_chat_roundtrip(stack: Stack, client_for) -> None:
    a = stack.engine("a")
    stack.start_gateway(
        {
            "providers": [provider("pa", a)],
            "deployments": [deployment("m", "pa", upstream_model="up-m", context_window=4096)],
        }
    )
    client = client_for(stack)
    resp = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "hello there"}]
    )
    body = resp.parse()
    assert body.model == "m"
    assert a.requests[-1].body["model"] == "up-m"
    assert resp.headers["x-fleetgate-route"] == "pa"
    stream = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hello there"}], stream=True
    )
    chunks = list(stream)
    assert all(c.model == "m" for c in chunks)
    assert len(chunks) > 3
