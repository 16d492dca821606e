"""Active health checks: while a circuit is open, the gateway asks the host itself, brings
it back as soon as it answers, and never sends a client's request as the probe."""

from __future__ import annotations

import time

import openai

from fleetgate.testing import Fault
from tests.harness import Stack, deployment, provider, wait_until

MSG = [{"role": "user", "content": "hello"}]


def _two_hosts(stack: Stack, cooldown: float, check: dict | None = None) -> openai.OpenAI:
    a, b = stack.engine("a"), stack.engine("b")
    extra = {"health_check": check} if check is not None else {}
    stack.start_gateway(
        {
            "routing": {"circuit": {"cooldown_seconds": cooldown}},
            "providers": [provider("pa", a, **extra), provider("pb", b)],
            "deployments": [
                deployment("m", "pa", priority=0, upstream_model="up"),
                deployment("m", "pb", priority=1, upstream_model="up"),
            ],
        }
    )
    return openai.OpenAI(base_url=stack.url + "/v1", api_key="k", max_retries=0, timeout=10)


def _route(client: openai.OpenAI) -> tuple[str, str]:
    raw = client.chat.completions.with_raw_response.create(model="m", messages=MSG)
    return raw.headers["x-fleetgate-route"], raw.headers["x-fleetgate-attempts"]


def test_a_restarted_engine_is_back_long_before_its_cooldown(stack: Stack) -> None:
    client = _two_hosts(stack, cooldown=30, check={"interval_seconds": 0.2})
    a = stack.engines["a"]
    stack.lt.run(a.stop())
    assert _route(client) == ("pb", "2")  # refused: the circuit opens at once
    health = stack.gateway.pipeline.state.health("pa")
    assert health.circuit == "open" and health.open_cause == "connect refused"
    assert _route(client) == ("pb", "1")  # kept out
    stack.lt.run(a.start())  # the same port again
    restarted = time.monotonic()
    wait_until(lambda: stack.gateway.pipeline.state.health("pa").circuit == "closed", 5, "checked")
    assert time.monotonic() - restarted < 2  # not the 30 s cooldown
    assert a.requests[0].path == "/health"  # the gateway's own check came first
    assert _route(client) == ("pa", "1")  # and the first client request just works


def test_no_client_request_probes_a_host_its_check_finds_down(stack: Stack) -> None:
    """Past the cooldown, a host whose health check fails stays out: no client pays a
    failed attempt to learn it is still down."""
    client = _two_hosts(stack, cooldown=0.3, check={"interval_seconds": 0.1})
    a = stack.engines["a"]
    a.set_fault(Fault("status", status=503))  # every path, /health too: the engine is down
    assert _route(client) == ("pb", "2")
    assert _route(client) == ("pb", "2")  # the second failure opens the circuit
    inference = len([r for r in a.requests if r.path != "/health"])
    deadline = time.monotonic() + 1.0  # three cooldowns
    while time.monotonic() < deadline:
        assert _route(client) == ("pb", "1")
    assert len([r for r in a.requests if r.path != "/health"]) == inference
    assert stack.gateway.pipeline.state.health("pa").last_error == "503"
    checks = len([r for r in a.requests if r.path == "/health"])
    assert checks >= 3  # asked on its interval meanwhile


def test_a_circuit_that_5xx_opened_keeps_its_cooldown(stack: Stack) -> None:
    """An engine that answers /health while its inference fails is not brought back by it."""
    client = _two_hosts(stack, cooldown=30, check={"interval_seconds": 0.1})
    a = stack.engines["a"]
    a.fail_next(Fault("status", status=503), 2)  # inference only
    _route(client), _route(client)
    wait_until(lambda: any(r.path == "/health" for r in a.requests), 5, "a check")
    checker = stack.gateway.pipeline.health_checks
    wait_until(lambda: checker.checks >= 3, 5, "more checks")
    assert stack.gateway.pipeline.state.health("pa").circuit == "open"


def test_checks_can_be_turned_off(stack: Stack) -> None:
    client = _two_hosts(stack, cooldown=30, check={"enabled": False})
    a = stack.engines["a"]
    stack.lt.run(a.stop())
    _route(client)
    stack.lt.run(a.start())
    checker = stack.gateway.pipeline.health_checks
    rounds = checker.rounds
    wait_until(lambda: checker.rounds >= rounds + 5, 5, "rounds of the checker")
    assert a.requests == [] and checker.checks == 0
    assert stack.gateway.pipeline.state.health("pa").circuit == "open"
