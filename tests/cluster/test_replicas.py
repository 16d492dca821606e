"""Two gateway replicas sharing the real PostgreSQL and Redis."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from fleetgate.control.plane import ControlOptions
from fleetgate.server.app import Gateway
from fleetgate.testing import Fault
from tests.admin.helpers import ADMIN_KEY, admin, early_in_a_minute, two_tier_fleet
from tests.harness import Stack, wait_until

MSG = [{"role": "user", "content": "hi"}]


def _options(pg_url: str, redis_url: str, namespace: str) -> ControlOptions:
    return ControlOptions(
        database_url=pg_url, redis_url=redis_url, redis_namespace=namespace, admin_key=ADMIN_KEY
    )


def _control(gw: Gateway) -> Any:
    assert gw.control is not None
    return gw.control


def _chat(stack: Stack, model: str = "m", **headers: str) -> httpx.Response:
    return httpx.post(
        stack.url + "/v1/chat/completions",
        json={"model": model, "messages": MSG},
        headers=headers,
        timeout=10,
    )


def _start_pair(
    stack: Stack, replica_b: Stack, opts: ControlOptions, **config: Any
) -> tuple[Gateway, Gateway]:
    fleet = {**two_tier_fleet(stack), **config}
    a = stack.start_gateway(fleet, opts)
    replica_b.engines = {}  # B shares A's engines; only A's stack stops them
    b = replica_b.start_gateway(fleet, opts)
    return a, b


def test_rate_limit_is_cluster_wide(
    stack: Stack, replica_b: Stack, pg_url: str, redis_url: str, redis_namespace: str
) -> None:
    _, b = _start_pair(
        stack, replica_b, _options(pg_url, redis_url, redis_namespace), auth={"enabled": True}
    )
    key = admin(stack).post("/admin/keys", json={"name": "k", "rpm": 4}).json()
    wait_until(lambda: len(_control(b).ring) == 1, 5, "replica B learned the new key")
    auth = {"authorization": f"Bearer {key['key']}"}
    early_in_a_minute()
    statuses = [_chat(s, **auth).status_code for s in (stack, replica_b) * 3]
    # 4 per minute for the whole cluster, not 4 per replica
    assert statuses == [200, 200, 200, 200, 429, 429]


def test_budget_spent_on_a_counts_on_b(
    stack: Stack, replica_b: Stack, pg_url: str, redis_url: str, redis_namespace: str
) -> None:
    fleet = {
        **two_tier_fleet(stack),
        "auth": {"enabled": True},
    }
    fleet["deployments"].append(
        {"id": "pa-n", "model": "n", "provider": "pa", "price": {"input": 1e6, "output": 1e6}}
    )
    opts = _options(pg_url, redis_url, redis_namespace)
    stack.start_gateway(fleet, opts)
    replica_b.engines = {}
    b = replica_b.start_gateway(fleet, opts)
    key = admin(stack).post("/admin/keys", json={"name": "k", "budget": 1.0}).json()
    wait_until(lambda: len(_control(b).ring) == 1, 5, "B learned the key")
    auth = {"authorization": f"Bearer {key['key']}"}
    assert _chat(stack, "n", **auth).status_code == 200  # spends the whole budget on A
    wait_until(lambda: _chat(replica_b, "n", **auth).status_code == 429, 5, "B knows")
    assert _chat(replica_b, "n", **auth).json()["error"]["code"] == "budget_exceeded"


def test_config_change_on_a_routes_on_b_within_a_second(
    stack: Stack, replica_b: Stack, pg_url: str, redis_url: str, redis_namespace: str
) -> None:
    a, b = _start_pair(stack, replica_b, _options(pg_url, redis_url, redis_namespace))
    assert _chat(replica_b, "n").status_code == 404
    resp = admin(stack).post(
        "/admin/deployments", json={"id": "pb-n", "model": "n", "provider": "pb"}
    )
    assert resp.status_code == 201
    changed = time.monotonic()
    wait_until(lambda: "n" in b.pipeline.holder.fleet.models, 1.0, "B rebuilt within 1 s")
    assert time.monotonic() - changed < 1.0
    assert b.pipeline.holder.fleet.version == a.pipeline.holder.fleet.version
    ok = _chat(replica_b, "n")
    assert ok.status_code == 200 and ok.headers["x-fleetgate-route"] == "pb-n"


def test_concurrent_edits_on_two_replicas_lose_nothing(
    stack: Stack, replica_b: Stack, pg_url: str, redis_url: str, redis_namespace: str
) -> None:
    a, b = _start_pair(stack, replica_b, _options(pg_url, redis_url, redis_namespace))

    def add(target: Stack, i: int) -> int:
        body = {"id": f"d{i}", "model": f"x{i}", "provider": "pa"}
        return admin(target).post("/admin/deployments", json=body).status_code

    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda i: add((stack, replica_b)[i % 2], i), range(8)))
    assert codes == [201] * 8
    ids = {d["id"] for d in admin(stack).get("/admin/deployments").json()["data"]}
    assert {f"d{i}" for i in range(8)} <= ids
    for gw in (a, b):  # both replicas end on the last version, with every edit in it
        wait_until(
            lambda gw=gw: gw.pipeline.holder.fleet.version == 9, 5, "last version everywhere"
        )
        assert {f"x{i}" for i in range(8)} <= set(gw.pipeline.holder.fleet.models)


def _pa_opened_by_a(
    stack: Stack, replica_b: Stack, opts: ControlOptions, cooldown: float
) -> tuple[Gateway, Gateway]:
    """Replicas A and B; one 503 on A opens pa's circuit for `cooldown` s, and B sees it."""
    a, b = _start_pair(
        stack,
        replica_b,
        opts,
        routing={"circuit": {"failure_threshold": 1, "cooldown_seconds": cooldown}},
    )
    stack.engines["a"].fail_next(Fault("status", status=503))
    assert _chat(stack).headers["x-fleetgate-route"] == "pb"  # A fell back and opened pa
    wait_until(
        lambda: b.pipeline.state.unavailable_reason("pa", time.time()) is not None,
        5,
        "B sees pa open",
    )
    return a, b


def test_circuit_state_is_shared(
    stack: Stack, replica_b: Stack, pg_url: str, redis_url: str, redis_namespace: str
) -> None:
    _pa_opened_by_a(stack, replica_b, _options(pg_url, redis_url, redis_namespace), 60)
    # B routes around pa without ever trying it
    before = len(stack.engines["a"].requests)
    assert _chat(replica_b).headers["x-fleetgate-route"] == "pb"
    assert len(stack.engines["a"].requests) == before
    live = admin(replica_b).get("/admin/fleet").json()
    pa = next(d for d in live["deployments"] if d["id"] == "pa")
    assert pa["health"]["circuit"] == "open" and pa["health"]["cooldown_until"] > time.time()


def test_one_half_open_probe_for_the_whole_cluster(
    stack: Stack, replica_b: Stack, pg_url: str, redis_url: str, redis_namespace: str
) -> None:
    a, b = _pa_opened_by_a(stack, replica_b, _options(pg_url, redis_url, redis_namespace), 1)
    engine = stack.engines["a"]
    engine.hold()  # the probe stays out until every other request has been answered
    wait_until(
        lambda: (
            a.pipeline.state.health("pa").circuit
            == b.pipeline.state.health("pa").circuit
            == "half-open"
        ),
        5,
        "both see pa half-open",
    )
    before = len(engine.requests)
    with ThreadPoolExecutor(12) as pool:
        pending = [pool.submit(_chat, s) for s in [stack, replica_b] * 6]
        try:
            wait_until(lambda: sum(f.done() for f in pending) == 11, 10, "11 answered around pa")
            assert len(engine.requests) - before == 1  # one probe, not one per replica
        finally:
            engine.release()
        answers = [f.result(10) for f in pending]
    assert {r.status_code for r in answers} == {200}
    assert len(engine.requests) - before == 1
    routes = [r.headers["x-fleetgate-route"] for r in answers]
    assert routes.count("pa") == 1 and routes.count("pb") == 11
    # its success is shared: both close the circuit, and the claim is freed
    wait_until(lambda: b.pipeline.state.health("pa").circuit == "closed", 5, "B sees pa closed")
    assert _chat(replica_b).headers["x-fleetgate-route"] == "pa"


def test_inflight_counts_are_shared_approximately(
    stack: Stack, replica_b: Stack, pg_url: str, redis_url: str, redis_namespace: str
) -> None:
    stack.engine("a", latency=1.5)  # slow enough to be seen in flight
    _, b = _start_pair(stack, replica_b, _options(pg_url, redis_url, redis_namespace))
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(_chat, stack)
        wait_until(lambda: b.pipeline.state.health("pa").inflight == 1, 5, "B counts A's request")
        assert b.pipeline.state.local_inflight("pa") == 0  # type: ignore[attr-defined]
        assert pending.result(10).status_code == 200
    wait_until(lambda: b.pipeline.state.health("pa").inflight == 0, 5, "B sees it finish")


def test_without_redis_workers_on_one_store_converge(
    stack: Stack, replica_b: Stack, sqlite_url: str
) -> None:
    """Like `serve --workers 2` on the default SQLite store: no Redis, changes by polling."""
    opts = ControlOptions(database_url=sqlite_url, admin_key=ADMIN_KEY, poll_interval=0.2)
    _, b = _start_pair(stack, replica_b, opts)
    api = admin(stack)
    assert (
        api.post(
            "/admin/deployments", json={"id": "pb-n", "model": "n", "provider": "pb"}
        ).status_code
        == 201
    )
    wait_until(lambda: "n" in b.pipeline.holder.fleet.models, 5, "B polled the change")
    assert api.post("/admin/keys", json={"name": "k"}).status_code == 201
    wait_until(lambda: len(_control(b).ring) == 1, 5, "B polled the new key")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OwnRedis:
    """A redis-server of this test's own, so the test can kill it."""

    def __init__(self, directory: Path) -> None:
        server = shutil.which("redis-server")
        if server is None:
            pytest.fail("redis-server is not installed (see .ci/run)")
        self.binary = server
        self.directory = directory
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
            ],
            stdout=subprocess.DEVNULL,
        )

        def up() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return True
            except OSError:
                return False

        wait_until(up, 10, "own redis-server up")

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None


def test_losing_redis_degrades_to_local_state(
    stack: Stack, replica_b: Stack, pg_url: str, tmp_path: Path, redis_namespace: str
) -> None:
    own = OwnRedis(tmp_path)
    own.start()
    try:
        a, b = _start_pair(
            stack,
            replica_b,
            _options(pg_url, own.url, redis_namespace),
            auth={"enabled": True},
        )
        key = admin(stack).post("/admin/keys", json={"name": "k", "rpm": 3}).json()
        wait_until(lambda: len(_control(b).ring) == 1, 5, "B learned the key")
        auth = {"authorization": f"Bearer {key['key']}"}
        early_in_a_minute()
        assert _chat(stack, **auth).status_code == 200  # one of 3, counted in Redis

        own.kill()
        # requests keep working on both replicas; limits fall back to each replica's own
        # counters (3 per replica while Redis is away)
        assert [_chat(stack, **auth).status_code for _ in range(4)] == [200, 200, 200, 429]
        assert [_chat(replica_b, **auth).status_code for _ in range(4)] == [200, 200, 200, 429]
        for gw in (a, b):
            wait_until(lambda gw=gw: not _control(gw).link.healthy, 5, "link marked down")
        status = admin(stack).get("/admin/status").json()["redis"]
        assert status["connected"] is False and status["errors"] >= 1 and status["outages"] >= 1
        metrics = httpx.get(stack.url + "/metrics", timeout=10).text
        assert "fleetgate_redis_connected 0.0" in metrics
        assert "fleetgate_redis_errors 0.0" not in metrics
        # circuit changes while down stay local and never fail the request
        stack.engines["a"].fail_next(Fault("status", status=503))
        assert _chat(stack, **auth).status_code in (200, 429)

        own.start()  # Redis is back: the replicas reconnect and share changes again
        for gw in (a, b):
            wait_until(lambda gw=gw: _control(gw).link.healthy, 10, "link back up")
        api = admin(stack)
        assert (
            api.post(
                "/admin/deployments", json={"id": "pb-n", "model": "n", "provider": "pb"}
            ).status_code
            == 201
        )
        wait_until(lambda: "n" in b.pipeline.holder.fleet.models, 5, "B hears changes again")
    finally:
        own.kill()
