"""Replicas over the real PostgreSQL and Redis while PostgreSQL goes away and comes back:
spend is kept and written, the admin API answers 503 `store_unavailable`, and the log
says it once."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import psycopg
import pytest

from fleetgate.control.plane import ControlOptions
from fleetgate.server.app import Gateway
from tests.admin.helpers import ADMIN_KEY, admin
from tests.cluster.conftest import TcpProxy
from tests.harness import Stack, deployment, provider, wait_until

MSG = [{"role": "user", "content": "hi"}]
# the fake engine answers 8 completion tokens: 8 x 13125 / 1e6 = 0.105 per request
COST = 0.105
PRICED = {"input": 0, "output": 13125}


def _fleet(stack: Stack) -> dict[str, Any]:
    a = stack.engines.get("a") or stack.engine("a")
    return {
        "providers": [provider("pa", a)],
        "deployments": [deployment("m", "pa", price=PRICED)],
        "auth": {"enabled": True},
    }


def _pair(
    stack: Stack, replica_b: Stack, url: str, redis_url: str, namespace: str
) -> tuple[Gateway, Gateway]:
    opts = ControlOptions(
        database_url=url, redis_url=redis_url, redis_namespace=namespace, admin_key=ADMIN_KEY
    )
    fleet = _fleet(stack)
    a = stack.start_gateway(fleet, opts)
    replica_b.engines = {}  # B shares A's engine
    return a, replica_b.start_gateway(fleet, opts)


def _chat(stack: Stack, secret: str) -> httpx.Response:
    return httpx.post(
        stack.url + "/v1/chat/completions",
        json={"model": "m", "messages": MSG},
        headers={"authorization": f"Bearer {secret}"},
        timeout=10,
    )


def _stored_spent(pg_url: str, key_id: str) -> float:
    """The key's spend as the store holds it, read past the proxy."""
    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT spent FROM client_keys WHERE id = %s", (key_id,)).fetchone()
    assert row is not None
    return float(row[0])


def _control(gw: Gateway) -> Any:
    assert gw.control is not None
    return gw.control


def test_spend_served_during_a_store_outage_is_kept_and_written(
    stack: Stack,
    replica_b: Stack,
    pg_url: str,
    pg_outage: tuple[str, TcpProxy],
    redis_url: str,
    redis_namespace: str,
) -> None:
    url, proxy = pg_outage
    a, b = _pair(stack, replica_b, url, redis_url, redis_namespace)
    key = admin(stack).post("/admin/keys", json={"name": "k", "budget": 100}).json()
    wait_until(lambda: len(_control(b).ring) == 1, 5, "B learned the key")
    replicas = (stack, replica_b)
    for i in range(10):
        assert _chat(replicas[i % 2], key["key"]).status_code == 200
    wait_until(lambda: abs(_stored_spent(pg_url, key["id"]) - 10 * COST) < 1e-9, 5, "stored")

    proxy.cut()
    for i in range(20):
        assert _chat(replicas[i % 2], key["key"]).status_code == 200  # serving goes on
    for gw in (a, b):  # each replica tried to write its spend, and kept it
        wait_until(lambda gw=gw: _control(gw).status()["spend_pending"] > 0, 5, "spend kept")
    assert abs(_stored_spent(pg_url, key["id"]) - 10 * COST) < 1e-9

    proxy.restore()  # no request needed: the kept spend is retried on its own
    wait_until(lambda: abs(_stored_spent(pg_url, key["id"]) - 30 * COST) < 1e-9, 10, "written")
    for gw in (a, b):  # (the commit can be seen a moment before the writer counts it)
        wait_until(lambda gw=gw: _control(gw).status()["spend_pending"] == 0, 5, "none left")
    listed = admin(stack).get(f"/admin/keys/{key['id']}").json()
    assert abs(listed["spent"] - 30 * COST) < 1e-9


def test_a_store_outage_logs_once_and_counts_in_between(
    stack: Stack,
    replica_b: Stack,
    pg_outage: tuple[str, TcpProxy],
    redis_url: str,
    redis_namespace: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    url, proxy = pg_outage
    a, b = _pair(stack, replica_b, url, redis_url, redis_namespace)
    key = admin(stack).post("/admin/keys", json={"name": "k"}).json()
    wait_until(lambda: len(_control(b).ring) == 1, 5, "B learned the key")
    caplog.set_level(logging.WARNING, logger="fleetgate")
    proxy.cut()
    for i in range(30):
        assert _chat((stack, replica_b)[i % 2], key["key"]).status_code == 200
    for gw in (a, b):
        wait_until(lambda gw=gw: _control(gw).store_outage.failures >= 3, 10, "failures counted")
    status = admin(stack).get("/admin/status").json()
    assert status["store"]["connected"] is False and status["store"]["failures"] >= 3
    metrics = httpx.get(stack.url + "/metrics", timeout=10).text
    assert "fleetgate_store_connected 0.0" in metrics
    proxy.restore()
    for gw in (a, b):
        wait_until(lambda gw=gw: _control(gw).store_outage.up, 10, "the store is back")
    ours = [r for r in caplog.records if r.name.startswith("fleetgate")]
    down = [r for r in ours if "the store" in r.getMessage() and "unreachable" in r.getMessage()]
    back = [r for r in ours if "reachable again" in r.getMessage()]
    assert len(down) == 2 and len(back) == 2  # one each per replica
    assert "operation(s) failed meanwhile" in back[0].getMessage()
    assert not [r for r in ours if r.exc_info], "no tracebacks for an outage"


def test_the_admin_api_answers_503_during_a_store_outage_on_a_healthy_connection(
    stack: Stack, pg_outage: tuple[str, TcpProxy], caplog: pytest.LogCaptureFixture
) -> None:
    url, proxy = pg_outage
    a = stack.engine("a")
    stack.start_gateway(
        {
            "providers": [provider("pa", a)],
            "deployments": [deployment("m", "pa")],
        },
        ControlOptions(database_url=url, admin_key=ADMIN_KEY),
    )
    caplog.set_level(logging.ERROR)
    # one connection for everything: an answer that breaks it would fail the next request
    client = httpx.Client(
        base_url=stack.url,
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        timeout=10,
        limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
    )
    assert client.get("/admin/requests").status_code == 200
    proxy.cut()
    answers = [
        client.patch("/admin/deployments/pa", json={"priority": 3}),
        client.get("/admin/requests"),
        client.post("/admin/keys", json={"name": "k"}),
    ]
    for resp in answers:
        assert resp.status_code == 503, resp.text
        assert resp.headers["content-type"] == "application/json"
        error = resp.json()["error"]
        assert (error["code"], error["type"]) == ("store_unavailable", "service_unavailable_error")
        assert "store cannot be reached" in error["message"]
    proxied = client.post("/v1/chat/completions", json={"model": "m", "messages": MSG})
    assert proxied.status_code == 200  # the proxy path never needs the store
    assert not [r for r in caplog.records if "ASGI" in r.getMessage()]
    proxy.restore()
    wait_until(lambda: client.get("/admin/requests").status_code == 200, 10, "the store is back")
    assert client.patch("/admin/deployments/pa", json={"priority": 3}).status_code == 200
    stack.stop_gateway()  # while the store is reachable: the proxy's teardown comes first
