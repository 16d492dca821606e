"""Defect 1: one unauthenticated request with a 10 KB model name stopped the PostgreSQL
request log for good. Ingress now bounds client strings (400 naming the field), and a row
the store refuses is set apart so the rows after it are still written."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from fleetgate.record.recorder import RequestRecord
from fleetgate.store.database import database_url, migrate, open_database
from fleetgate.store.request_log import RequestLog
from tests.admin.helpers import admin, options
from tests.harness import Stack, deployment, provider, wait_until

MSG = [{"role": "user", "content": "hi"}]


def _fleet(stack: Stack) -> dict:
    engine = stack.engine("a")
    return {
        "auth": {"enabled": True},
        "providers": [provider("pa", engine)],
        "deployments": [deployment("m", "pa")],
    }


def test_ten_kb_model_name_keyless_then_twenty_good_requests(stack: Stack, pg_url: str) -> None:
    stack.start_gateway(_fleet(stack), options(pg_url))
    api = admin(stack)
    secret = api.post("/admin/keys", json={"name": "app"}).json()["key"]

    poison = httpx.post(
        stack.url + "/v1/chat/completions", json={"model": "x" * 10_240, "messages": MSG}
    )
    assert poison.status_code == 400
    assert poison.json()["error"]["param"] == "model"
    assert "255" in poison.json()["error"]["message"]

    with httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {secret}"}) as c:
        for _ in range(20):
            assert c.post("/v1/chat/completions", json={"model": "m", "messages": MSG}).is_success

    def status() -> dict:
        return api.get("/admin/status").json()

    wait_until(lambda: status()["records_written"] >= 20, 10, "twenty rows written")
    final = status()
    assert final["log_write_failures"] == 0
    assert final["records_rejected"] == 0
    rows = api.get("/admin/requests", params={"limit": 100}).json()["data"]
    assert len(rows) == 20 and {r["requested_model"] for r in rows} == {"m"}


def _record(request_id: str, model: str = "m") -> RequestRecord:
    return RequestRecord(
        request_id=request_id,
        time=time.time(),
        endpoint="chat.completions",
        requested_model=model,
        resolution="rejected",
        stream=False,
        status=401,
        error_code="invalid_api_key",
        latency=0.001,
        overhead=0.001,
        deployment_id=None,
        provider_id=None,
    )


def test_a_row_postgresql_refuses_never_blocks_the_rows_after_it(pg_url: str) -> None:
    async def run() -> tuple[RequestLog, list[str]]:
        db = open_database(database_url(None, None, explicit=pg_url))
        await migrate(db)
        log = RequestLog(db)
        try:
            # the poisoned row first, in the middle of a batch, and a NUL that
            # PostgreSQL text cannot hold: each is set apart, the rest is written
            await log.write([_record("poison-long", "x" * 10_240)])
            await log.write([_record(f"good-{i}") for i in range(10)])
            await log.write(
                [
                    *(_record(f"mid-{i}") for i in range(5)),
                    _record("poison-nul", "a\x00b"),
                    *(_record(f"after-{i}") for i in range(5)),
                ]
            )
            await log.write([_record(f"later-{i}") for i in range(5)])
            page = await log.page(limit=100)
            return log, [r["request_id"] for r in page.rows]
        finally:
            await db.dispose()

    log, ids = asyncio.run(run())
    assert log.rejected == 2
    assert log.written == 25
    assert log.failures == 0
    assert not log._pending
    assert "poison-long" not in ids and "poison-nul" not in ids
    assert {f"good-{i}" for i in range(10)} | {f"after-{i}" for i in range(5)} <= set(ids)


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", {"model": "m", "messages": MSG, "user": "u" * 300}, "user"),
        ("/v1/chat/completions", {"model": "m\x07", "messages": MSG}, "model"),
        ("/v1/responses", {"model": "m", "input": "hi", "user": "u" * 300}, "user"),
        (
            "/v1/messages",
            {"model": "m", "max_tokens": 5, "messages": MSG, "metadata": {"user_id": "u" * 300}},
            "metadata.user_id",
        ),
        ("/api/chat", {"model": "m" * 256, "messages": MSG}, "model"),
        (
            "/v1/chat/completions",
            {"model": "m", "messages": MSG, "provider": {"only": ["p" * 300]}},
            "provider.only[0]",
        ),
    ],
)
def test_client_strings_are_bounded_with_a_400_naming_the_field(
    stack: Stack, path: str, body: dict, param: str
) -> None:
    engine = stack.engine("a")
    stack.start_gateway(
        {"providers": [provider("pa", engine)], "deployments": [deployment("m", "pa")]}
    )
    resp = httpx.post(stack.url + path, json=body)
    assert resp.status_code == 400, resp.text
    assert param in resp.text
    assert not engine.requests


def test_request_id_and_routing_headers_are_bounded(stack: Stack) -> None:
    engine = stack.engine("a")
    stack.start_gateway(
        {"providers": [provider("pa", engine)], "deployments": [deployment("m", "pa")]}
    )
    body = {"model": "m", "messages": MSG}
    # an id outside the rule (1-128 of A-Z a-z 0-9 . _ : -) is replaced by one of ours
    long_id = httpx.post(
        stack.url + "/v1/chat/completions", json=body, headers={"X-Request-Id": "r" * 129}
    )
    assert long_id.status_code == 200
    assert len(long_id.headers["x-request-id"]) == 24
    tier = httpx.post(
        stack.url + "/v1/chat/completions", json=body, headers={"X-Fleetgate-Tier": "t" * 300}
    )
    assert tier.status_code == 400
    assert tier.json()["error"]["param"] == "x-fleetgate-tier"
    ok = httpx.post(
        stack.url + "/v1/chat/completions", json=body, headers={"X-Request-Id": "r" * 128}
    )
    assert ok.status_code == 200 and ok.headers["x-request-id"] == "r" * 128
    assert len(engine.requests) == 2
