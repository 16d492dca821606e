"""Active health checks across replicas: one replica checks a provider per interval, and
what it finds reaches every replica through the shared circuit state."""

from __future__ import annotations

import time

import httpx

from fleetgate.control.plane import ControlOptions
from fleetgate.testing import Fault
from tests.admin.helpers import ADMIN_KEY
from tests.harness import Stack, deployment, provider, wait_until

MSG = [{"role": "user", "content": "hello"}]
INTERVAL = 0.2


def _chat(stack: Stack) -> httpx.Response:
    return httpx.post(
        stack.url + "/v1/chat/completions", json={"model": "m", "messages": MSG}, timeout=10
    )


def test_one_replica_checks_and_every_replica_brings_it_back(
    stack: Stack, replica_b: Stack, pg_url: str, redis_url: str, redis_namespace: str
) -> None:
    engine_a, engine_b = stack.engine("a"), stack.engine("b")
    fleet = {
        "routing": {"circuit": {"cooldown_seconds": 60}},
        "providers": [
            provider("pa", engine_a, health_check={"interval_seconds": INTERVAL}),
            provider("pb", engine_b),
        ],
        "deployments": [deployment("m", "pa", priority=0), deployment("m", "pb", priority=1)],
    }
    opts = ControlOptions(
        database_url=pg_url,
        redis_url=redis_url,
        redis_namespace=redis_namespace,
        admin_key=ADMIN_KEY,
    )
    a = stack.start_gateway(fleet, opts)
    replica_b.engines = {}  # B shares A's engines
    b = replica_b.start_gateway(fleet, opts)

    stack.lt.run(engine_a.stop())
    assert _chat(stack).headers["x-fleetgate-route"] == "pb"  # A sees pa refuse: open
    wait_until(lambda: b.pipeline.state.health("pa").circuit == "open", 5, "B sees pa open")
    # the engine is back but not ready: its /health says 503, so both keep it out, and
    # the two replicas' checkers share one check per interval between them
    engine_a.set_fault(Fault("status", status=503))
    stack.lt.run(engine_a.start())
    checks = lambda: len([r for r in engine_a.requests if r.path == "/health"])  # noqa: E731
    wait_until(lambda: checks() >= 1, 5, "a first check")
    first, started = checks(), time.monotonic()
    wait_until(lambda: checks() >= first + 5, 10, "five more checks")
    assert time.monotonic() - started >= 4 * INTERVAL  # not one per replica and interval
    assert _chat(replica_b).headers["x-fleetgate-route"] == "pb"
    assert [r.path for r in engine_a.requests if r.path != "/health"] == []
    # ready: the next check, whichever replica makes it, brings pa back on both
    engine_a.set_fault(None)
    wait_until(
        lambda: (
            a.pipeline.state.health("pa").circuit
            == b.pipeline.state.health("pa").circuit
            == "closed"
        ),
        5,
        "both see pa closed",
    )
    assert _chat(replica_b).headers["x-fleetgate-route"] == "pa"
