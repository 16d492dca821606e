"""Operating the live fleet: reset a deployment, and `fleetgate status` from a shell."""

from __future__ import annotations

import re

import openai
import pytest

from fleetgate.cli import main
from tests.admin.helpers import ADMIN_KEY, admin, options
from tests.harness import Stack, deployment, provider

MSG = [{"role": "user", "content": "hello"}]


def _fleet(stack: Stack) -> dict:
    a, b, c = stack.engine("a"), stack.engine("b"), stack.engine("c")
    off = {"health_check": {"enabled": False}}  # the circuit stays open until reset
    return {
        "routing": {"circuit": {"cooldown_seconds": 300}},
        "providers": [provider("pa", a, **off), provider("pb", b), provider("pc", c)],
        "deployments": [
            deployment("m", "pa", priority=0, context_window=8192),
            deployment("m", "pb", priority=1),
            deployment("m", "pc", priority=2, enabled=False),
        ],
    }


def _route(client: openai.OpenAI) -> tuple[str, str]:
    raw = client.chat.completions.with_raw_response.create(model="m", messages=MSG)
    return raw.headers["x-fleetgate-route"], raw.headers["x-fleetgate-attempts"]


def test_reset_closes_the_circuit_at_once(stack: Stack, sqlite_url: str) -> None:
    stack.start_gateway(_fleet(stack), options(sqlite_url))
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="k", max_retries=0, timeout=10)
    a = stack.engines["a"]
    stack.lt.run(a.stop())
    assert _route(client) == ("pb", "2")
    stack.lt.run(a.start())
    assert _route(client) == ("pb", "1")  # out for 300 s, although it is back
    api = admin(stack)
    assert admin(stack, "wrong").post("/admin/deployments/pa/reset").status_code == 401
    missing = api.post("/admin/deployments/nope/reset")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    resp = api.post("/admin/deployments/pa/reset")
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["was"] == "open" and body["health"]["circuit"] == "closed"
    assert body["health"]["available"] is True
    assert _route(client) == ("pa", "1")


def test_status_prints_the_live_fleet(
    stack: Stack,
    sqlite_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stack.start_gateway(_fleet(stack), options(sqlite_url))
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="k", max_retries=0, timeout=10)
    stack.lt.run(stack.engines["a"].stop())
    _route(client)
    monkeypatch.delenv("FLEETGATE_ADMIN_KEY", raising=False)
    assert main(["status", "--url", stack.url]) == 2
    assert "FLEETGATE_ADMIN_KEY" in capsys.readouterr().err
    monkeypatch.setenv("FLEETGATE_ADMIN_KEY", "wrong")
    assert main(["status", "--url", stack.url]) == 1
    assert "HTTP 401" in capsys.readouterr().err
    monkeypatch.setenv("FLEETGATE_ADMIN_KEY", ADMIN_KEY)
    assert main(["status", "--url", stack.url]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "open" in lines["pa"] and "(connect refused)" in lines["pa"]
    assert "8192 (config)" in lines["pa"] and re.search(r"connect refused \d+s ago", lines["pa"])
    assert " up " in lines["pb"] and "disabled" in lines["pc"]
    assert lines["config"].endswith("3 deployment(s), 2 out")
