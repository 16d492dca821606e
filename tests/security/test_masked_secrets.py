"""Defect 5: GET then PUT of a provider stored the mask `***` as its key, and the upstream
then received `Bearer ***`. A masked value written back now means "unchanged", for every
secret field (`api_key`, each of `keys`, each header value)."""

from __future__ import annotations

import httpx

from tests.admin.helpers import admin, options
from tests.harness import Stack, deployment, provider

MSG = [{"role": "user", "content": "hi"}]


def test_get_then_put_keeps_every_secret(stack: Stack, sqlite_url: str) -> None:
    engine = stack.engine("a")
    secrets = {
        "api_key": "sk-literal-111111",
        "keys": {"team": "sk-team-222222", "env": "${TEAM_KEY}"},
        "headers": {"X-Upstream-Auth": "hdr-333333"},
    }
    gw = stack.start_gateway(
        {"providers": [provider("pa", engine, **secrets)], "deployments": [deployment("m", "pa")]},
        options(sqlite_url),
    )
    api = admin(stack)
    shown = api.get("/admin/providers/pa").json()
    assert shown["api_key"] == "***" and shown["keys"]["team"] == "***"
    assert shown["headers"] == {"X-Upstream-Auth": "***"}

    shown["max_concurrency"] = 7  # a real change beside the masked secrets
    resp = api.put("/admin/providers/pa", json=shown)
    assert resp.status_code == 200, resp.text
    resp = api.patch("/admin/providers/pa", json={"api_key": "***", "keys": {"team": "***"}})
    assert resp.status_code == 200, resp.text

    live = gw.pipeline.holder.fleet.providers["pa"]
    assert live.max_concurrency == 7
    assert live.api_key == "sk-literal-111111"
    assert dict((label, key) for label, key, _ in live.keys)["team"] == "sk-team-222222"
    assert dict(live.headers) == {"X-Upstream-Auth": "hdr-333333"}
    assert httpx.post(
        stack.url + "/v1/chat/completions", json={"model": "m", "messages": MSG}
    ).is_success
    sent = engine.requests[-1].headers
    assert sent["Authorization"] == "Bearer sk-literal-111111"
    assert sent["X-Upstream-Auth"] == "hdr-333333"


def test_a_mask_with_nothing_behind_it_is_refused(stack: Stack, sqlite_url: str) -> None:
    engine = stack.engine("a")
    stack.start_gateway(
        {"providers": [provider("pa", engine)], "deployments": [deployment("m", "pa")]},
        options(sqlite_url),
    )
    api = admin(stack)
    resp = api.post(
        "/admin/providers", json={"id": "pb", "base_url": engine.url + "/v1", "api_key": "***"}
    )
    assert resp.status_code == 400 and "api_key" in resp.json()["error"]["message"]
    resp = api.patch("/admin/providers/pa", json={"headers": {"X-New": "***"}})
    assert resp.status_code == 400 and "headers.X-New" in resp.json()["error"]["message"]
    assert api.get("/admin/providers/pb").status_code == 404
