"""Client keys: hashed storage, shown once, Bearer and x-api-key, allow-lists, limits, budget."""

from __future__ import annotations

import asyncio

import httpx

from fleetgate.store.database import database_url, open_database
from tests.admin.helpers import admin, early_in_a_minute, options, two_tier_fleet
from tests.harness import Stack, wait_until

MSG = [{"role": "user", "content": "hi"}]


def _chat(stack: Stack, model: str = "m", **headers: str) -> httpx.Response:
    return httpx.post(
        stack.url + "/v1/chat/completions",
        json={"model": model, "messages": MSG},
        headers=headers,
        timeout=10,
    )


def _auth_fleet(stack: Stack) -> dict:
    config = two_tier_fleet(stack)
    config["auth"] = {"enabled": True}
    config["deployments"].append(
        {"id": "pa-n", "model": "n", "provider": "pa", "price": {"input": 1e6, "output": 1e6}}
    )
    return config


def test_keys_auth_allow_lists_and_rpm(stack: Stack, db_url: str) -> None:
    stack.start_gateway(_auth_fleet(stack), options(db_url))
    api = admin(stack)
    resp = api.post("/admin/keys", json={"name": "app", "allowed_models": ["M"], "rpm": 3})
    assert resp.status_code == 201, resp.text
    created = resp.json()
    secret = created["key"]
    assert secret.startswith("fg-") and created["prefix"] == secret[:10]

    # the secret is shown once: never listed, never stored in clear
    listed = api.get("/admin/keys").json()["data"]
    assert [k["id"] for k in listed] == [created["id"]] and "key" not in listed[0]
    assert "key_hash" not in listed[0]

    async def stored() -> list[str]:
        db = open_database(database_url(db_url))
        try:
            rows = await db.read(lambda c: c.tuples("SELECT * FROM client_keys"))
            assert rows
            return [str(r) for r in rows]
        finally:
            await db.dispose()

    assert all(secret not in row for row in asyncio.run(stored()))

    early_in_a_minute()
    # the catalog and explain need a key too, but count no limits
    assert httpx.get(stack.url + "/v1/models", timeout=10).status_code == 401
    models = httpx.get(stack.url + "/v1/models", headers={"x-api-key": secret}, timeout=10)
    assert models.status_code == 200
    # a key sees the models it may use: "m", not "n"
    assert [m["id"] for m in models.json()["data"]] == ["m"]
    assert httpx.get(stack.url + "/api/tags", timeout=10).status_code == 401
    tags = httpx.get(stack.url + "/api/tags", headers={"x-api-key": secret}, timeout=10)
    assert [m["model"] for m in tags.json()["models"]] == ["m"]
    assert httpx.get(stack.url + "/api/ps", timeout=10).status_code == 401
    explain = httpx.post(
        stack.url + "/v1/routing/explain", json={"model": "m", "messages": MSG}, timeout=10
    )
    assert explain.status_code == 401
    missing = _chat(stack)
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "invalid_api_key"
    wrong = _chat(stack, authorization="Bearer fg-nope")
    assert wrong.status_code == 401
    assert _chat(stack, authorization=f"Bearer {secret}").status_code == 200
    assert _chat(stack, **{"x-api-key": secret}).status_code == 200
    denied = _chat(stack, "n", authorization=f"Bearer {secret}")
    assert denied.status_code == 403 and denied.json()["error"]["code"] == "model_not_allowed"
    # rpm 3: the allow-list is checked before the counter, so the 403 did not count and
    # this is the third and last request of the minute
    assert _chat(stack, authorization=f"Bearer {secret}").status_code == 200
    limited = _chat(stack, authorization=f"Bearer {secret}")
    assert limited.status_code == 429 and limited.json()["error"]["code"] == "rate_limited"
    assert int(limited.headers["retry-after"]) >= 1

    # the key's requests are logged with its id; an edit applies at once
    wait_until(
        lambda: len(api.get("/admin/requests", params={"status": "ok"}).json()["data"]) == 3,
        10,
        "three rows",
    )
    rows = api.get("/admin/requests", params={"status": "ok"}).json()["data"]
    assert {r["client_key_id"] for r in rows} == {created["id"]}
    assert api.patch(f"/admin/keys/{created['id']}", json={"disabled": True}).is_success
    assert _chat(stack, authorization=f"Bearer {secret}").status_code == 401
    assert api.delete(f"/admin/keys/{created['id']}").status_code == 204
    assert api.get(f"/admin/keys/{created['id']}").status_code == 404


def test_a_valid_key_in_either_header_lets_the_request_in(stack: Stack, sqlite_url: str) -> None:
    """A client may present another service's key beside this one (Claude Code sends both
    `Authorization` and `x-api-key` when both of its variables are set): the valid one
    counts, whichever header came first; neither valid is a 401."""
    stack.start_gateway(_auth_fleet(stack), options(sqlite_url))
    secret = admin(stack).post("/admin/keys", json={"name": "both"}).json()["key"]
    other = "sk-ant-another-service"
    assert _chat(stack, **{"x-api-key": other, "authorization": f"Bearer {secret}"}).is_success
    assert _chat(stack, **{"authorization": f"Bearer {other}", "x-api-key": secret}).is_success
    neither = _chat(stack, **{"authorization": "Bearer fg-nope", "x-api-key": other})
    assert neither.status_code == 401 and neither.json()["error"]["code"] == "invalid_api_key"


def test_budget_stops_a_key_once_spent(stack: Stack, db_url: str) -> None:
    stack.start_gateway(_auth_fleet(stack), options(db_url))
    api = admin(stack)
    key = api.post("/admin/keys", json={"name": "b", "budget": 1.0}).json()
    auth = {"authorization": f"Bearer {key['key']}"}
    # `n` costs 1 per token: the first request spends the whole budget
    assert _chat(stack, "n", **auth).status_code == 200
    wait_until(lambda: _chat(stack, "n", **auth).status_code == 429, 10, "budget enforced")
    resp = _chat(stack, "n", **auth)
    assert resp.json()["error"]["code"] == "budget_exceeded"
    wait_until(
        lambda: api.get(f"/admin/keys/{key['id']}").json()["spent"] >= 1.0, 10, "spend stored"
    )


def test_auth_off_by_default(stack: Stack, db_url: str) -> None:
    stack.start_gateway(two_tier_fleet(stack), options(db_url))
    assert _chat(stack).status_code == 200


def test_tokens_per_minute_limit(stack: Stack, db_url: str) -> None:
    stack.start_gateway(_auth_fleet(stack), options(db_url))
    key = admin(stack).post("/admin/keys", json={"name": "t", "tpm": 3}).json()
    early_in_a_minute()
    auth = {"authorization": f"Bearer {key['key']}"}
    first = _chat(stack, **auth)
    assert first.status_code == 200
    assert first.json()["usage"]["total_tokens"] >= 3  # the whole minute's allowance
    wait_until(lambda: _chat(stack, **auth).status_code == 429, 10, "tpm enforced")
    resp = _chat(stack, **auth)
    assert resp.json()["error"]["code"] == "rate_limited"
    assert "3 tokens per minute" in resp.json()["error"]["message"]


def test_concurrent_requests_hold_the_budget_on_one_replica(stack: Stack, sqlite_url: str):
    config = _auth_fleet(stack)
    # 8 completion tokens at 13125 per million: 0.105 a request, so 5 fit a budget of 0.5
    config["deployments"].append(
        {"id": "pa-c", "model": "c", "provider": "pa", "price": {"input": 0, "output": 13125}}
    )
    stack.start_gateway(config, options(sqlite_url))
    key = admin(stack).post("/admin/keys", json={"name": "b", "budget": 0.5}).json()
    auth = {"authorization": f"Bearer {key['key']}"}
    assert _chat(stack, "c", **auth).status_code == 200  # the others hold what it cost
    stack.engines["a"].latency = 0.3  # all in flight at once

    async def burst() -> list[int]:
        async with httpx.AsyncClient(base_url=stack.url, timeout=10) as client:
            body = {"model": "c", "messages": MSG}
            answers = await asyncio.gather(
                *(client.post("/v1/chat/completions", json=body, headers=auth) for _ in range(10))
            )
        return [a.status_code for a in answers]

    assert sorted(asyncio.run(burst())) == [200] * 4 + [429] * 6
