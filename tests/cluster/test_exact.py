"""Three replicas over the real PostgreSQL and Redis: budgets and circuit breakers count
for the cluster as a whole, and clusters sharing one Redis stay apart."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from fleetgate.config.schema import CircuitConfig
from fleetgate.control.plane import ControlOptions
from fleetgate.server.app import Gateway
from fleetgate.state.redis_link import RedisLink
from fleetgate.state.redis_state import RedisState
from fleetgate.testing import Fault
from tests.admin.helpers import ADMIN_KEY, admin
from tests.harness import Stack, deployment, provider, wait_until

MSG = [{"role": "user", "content": "hi"}]
COST = 0.105  # 8 completion tokens at 13125 per million
BUDGET = 0.5  # so exactly 5 requests: 4 x 0.105 < 0.5 <= 5 x 0.105


def _fleet(stack: Stack, **extra: Any) -> dict[str, Any]:
    a = stack.engines.get("a") or stack.engine("a")
    b = stack.engines.get("b") or stack.engine("b")
    return {
        "providers": [provider("pa", a), provider("pb", b)],
        "deployments": [
            deployment("m", "pa", price={"input": 0, "output": 13125}),
            deployment("m", "pb", priority=1, price={"input": 0, "output": 13125}),
        ],
        **extra,
    }


def _three(
    stacks: list[Stack], options: ControlOptions, **extra: Any
) -> tuple[list[Stack], list[Gateway]]:
    fleet = _fleet(stacks[0], **extra)
    gateways = [stacks[0].start_gateway(fleet, options)]
    for s in stacks[1:]:
        s.engines = {}  # they share the first stack's engines
        gateways.append(s.start_gateway(fleet, options))
    return stacks, gateways


def _chat(stack: Stack, secret: str | None = None) -> httpx.Response:
    headers = {"authorization": f"Bearer {secret}"} if secret else {}
    return httpx.post(
        stack.url + "/v1/chat/completions",
        json={"model": "m", "messages": MSG},
        headers=headers,
        timeout=10,
    )


def _key(stack: Stack, gateways: list[Gateway], **fields: Any) -> dict[str, Any]:
    key = admin(stack).post("/admin/keys", json={"name": "k", **fields}).json()
    for gw in gateways:
        ring = gw.control.ring  # type: ignore[union-attr]
        wait_until(lambda ring=ring: ring.lookup(key["key"]) is not None, 5, "key everywhere")
    return key


@pytest.fixture
def three(
    stack: Stack,
    replica_b: Stack,
    replica_c: Stack,
    pg_url: str,
    redis_url: str,
    redis_namespace: str,
) -> Iterator[tuple[list[Stack], ControlOptions]]:
    options = ControlOptions(
        database_url=pg_url,
        redis_url=redis_url,
        redis_namespace=redis_namespace,
        admin_key=ADMIN_KEY,
    )
    yield [stack, replica_b, replica_c], options


def test_a_budget_admits_exactly_its_requests_across_replicas(
    three: tuple[list[Stack], ControlOptions],
) -> None:
    stacks, gateways = _three(three[0], three[1], auth={"enabled": True})
    # kept-alive connections: the next request reaches the next replica at once
    clients = [httpx.Client(base_url=s.url, timeout=10) for s in stacks]
    for trial in range(6):  # one after another, round the replicas, each trial a new key
        key = _key(stacks[0], gateways, budget=BUDGET)
        auth = {"authorization": f"Bearer {key['key']}"}
        body = {"model": "m", "messages": MSG}
        statuses = [
            clients[(trial + i) % 3].post("/v1/chat/completions", json=body, headers=auth)
            for i in range(8)
        ]
        assert [r.status_code for r in statuses] == [200] * 5 + [429] * 3, trial


def test_concurrent_requests_of_one_key_hold_the_budget(
    three: tuple[list[Stack], ControlOptions],
) -> None:
    stacks, gateways = _three(three[0], three[1], auth={"enabled": True})
    key = _key(stacks[0], gateways, budget=BUDGET)
    assert _chat(stacks[0], key["key"]).status_code == 200  # the next ones hold its cost
    stacks[0].engines["a"].latency = 0.3  # all in flight at once
    with ThreadPoolExecutor(12) as pool:
        statuses = list(pool.map(lambda i: _chat(stacks[i % 3], key["key"]).status_code, range(12)))
    assert sorted(statuses) == [200] * 4 + [429] * 8  # 5 in all: 5 x 0.105 >= 0.5
    api = admin(stacks[0])
    stored = lambda: api.get(f"/admin/keys/{key['id']}").json()["spent"]  # noqa: E731
    wait_until(lambda: abs(stored() - 5 * COST) < 1e-9, 5, "the 5 requests' spend stored")


def test_failures_on_several_replicas_add_up_to_the_threshold(
    three: tuple[list[Stack], ControlOptions],
) -> None:
    stacks, gateways = _three(
        three[0], three[1], routing={"circuit": {"failure_threshold": 3, "cooldown_seconds": 60}}
    )
    bad = stacks[0].engines["a"]
    bad.set_fault(Fault("status", status=500))
    bad.latency = 0.2  # the three failures overlap

    def wave() -> None:  # one request on every replica, at the same moment
        with ThreadPoolExecutor(3) as pool:
            routes = list(pool.map(lambda s: _chat(s).headers["x-fleetgate-route"], stacks))
        assert routes == ["pb"] * 3

    wave()
    for gw in gateways:
        wait_until(
            lambda gw=gw: gw.pipeline.state.health("pa").circuit == "open", 5, "open everywhere"
        )
        assert gw.pipeline.state.health("pa").consecutive_failures == 3
    wave()
    wave()
    assert len(bad.requests) == 3  # the cluster paid the threshold once, not once a replica


def test_clusters_on_two_redis_databases_stay_apart_by_default(
    stack: Stack, replica_b: Stack, replica_c: Stack, tmp_path: Path, redis_url: str
) -> None:
    """Pub/sub spans every database: the default namespace carries the db number."""
    base = redis_url.rsplit("/", 1)[0]
    dbs = (11, 12)
    try:
        fleet = _fleet(stack, routing={"circuit": {"failure_threshold": 1}})
        gateways = []
        for s, db, store in ((stack, 11, "a"), (replica_c, 11, "a"), (replica_b, 12, "b")):
            options = ControlOptions(
                database_url=f"sqlite:///{tmp_path / store}.db",
                redis_url=f"{base}/{db}",
                admin_key=ADMIN_KEY,
            )
            if s is not stack:
                s.engines = {}
            gateways.append(s.start_gateway(fleet, options))
        a, c, other = gateways
        assert a.control is not None and a.control.link is not None
        assert a.control.link.namespace == "fleetgate:11"
        stack.engines["a"].fail_next(Fault("status", status=503))
        assert _chat(stack).headers["x-fleetgate-route"] == "pb"  # 'pa' opens on db 11
        wait_until(
            lambda: c.pipeline.state.health("pa").circuit == "open", 5, "its own cluster hears"
        )
        assert (
            other.pipeline.state.health("pa").circuit == "closed"
        )  # the cluster on db 12 does not
        assert _chat(replica_b).headers["x-fleetgate-route"] == "pa"
        raw = redis.Redis.from_url(f"{base}/11").hget("fleetgate:11:health", "pa")
        assert raw is not None and b'"open_reason":"circuit open"' in raw
    finally:
        for db in dbs:
            client = redis.Redis.from_url(f"{base}/{db}")
            keys = list(client.scan_iter(match=f"fleetgate:{db}:*"))
            if keys:
                client.delete(*keys)
            client.close()


def test_failures_seen_at_the_same_moment_are_summed(redis_url: str, redis_namespace: str):
    """Three replicas' states record one failure each in the same instant (no pub/sub
    message can arrive in between): the cluster's count is 3, and the circuit opens."""
    circuit = CircuitConfig(failure_threshold=3, cooldown_seconds=60)

    async def main() -> list[tuple[int, str]]:
        states, links = [], []
        for _ in range(3):
            link = RedisLink(redis_url, redis_namespace)
            state = RedisState()
            state.attach(link)
            await link.start()
            states.append(state)
            links.append(link)
        try:
            now = time.time()
            for state in states:
                state.record_failure("d", now, circuit)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                if all(s.health("d").consecutive_failures == 3 for s in states):
                    break
                await asyncio.sleep(0.01)
            return [(s.health("d").consecutive_failures, s.health("d").circuit) for s in states]
        finally:
            for state, link in zip(states, links, strict=True):
                await state.close()
                await link.stop()

    assert asyncio.run(main()) == [(3, "open")] * 3
