"""The gateway's log: level and format, the access log, one line per state change, and
never a prompt or a secret in any of it."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from tests.harness import Stack, deployment, provider, wait_until
from tests.test_serve import checkout_env, free_port, ready

SECRET_PROMPT = "the-walrus-sings-at-midnight"
MSG = [{"role": "user", "content": SECRET_PROMPT}]


def _serve(stack: Stack, tmp_path: Path, server: dict[str, Any], *args: str) -> list[str]:
    """`fleetgate serve` on two fake engines (`pa` stopped, so its circuit opens), one
    request through it, then SIGTERM; returns every line it printed."""
    a, b = stack.engine("a"), stack.engine("b")
    stack.lt.run(a.stop())
    port = free_port()
    config = {
        "server": server,
        "providers": [provider("pa", a, api_key="sk-upstream-secret-1"), provider("pb", b)],
        "deployments": [deployment("m", "pa", priority=0), deployment("m", "pb", priority=1)],
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fleetgate",
            "serve",
            "--config",
            str(path),
            "--port",
            str(port),
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=checkout_env(tmp_path),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: ready(url), 30, "gateway ready")
        answer = httpx.post(
            url + "/v1/chat/completions",
            json={"model": "m", "messages": MSG},
            headers={"X-Request-Id": "req-logged-1"},
            timeout=10,
        )
        assert answer.status_code == 200
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = out.decode()
    assert SECRET_PROMPT not in text and "sk-upstream-secret-1" not in text
    return text.splitlines()


def test_json_log_with_access_lines(stack: Stack, tmp_path: Path) -> None:
    lines = _serve(stack, tmp_path, {"log_format": "json", "access_log": True})
    records = [json.loads(line) for line in lines if line.strip()]  # every line is JSON
    access = [r for r in records if r.get("event") == "request"]
    assert len(access) == 1
    line = access[0]
    assert line["logger"] == "fleetgate.access"
    assert line["request_id"] == "req-logged-1"
    assert (line["model"], line["deployment"], line["status"]) == ("m", "pb", 200)
    assert line["attempts"] == 2 and line["tried"] == ["pa:connect_refused", "pb:200"]
    assert line["latency_ms"] > 0 and line["overhead_ms"] >= 0
    opened = [r for r in records if r.get("event") == "circuit_open"]
    assert [(r["deployment"], r["reason"], r["level"]) for r in opened] == [
        ("pa", "connect refused", "warning")
    ]


def test_text_log_and_the_level(stack: Stack, tmp_path: Path) -> None:
    lines = _serve(stack, tmp_path, {"access_log": True}, "--log-level", "error")
    access = [line for line in lines if " fleetgate.access: request " in line]
    assert len(access) == 1  # asked for: written whatever the level
    assert "request_id=req-logged-1" in access[0] and "deployment=pb" in access[0]
    assert "tried=pa:connect_refused,pb:200" in access[0]
    assert not any("circuit open" in line for line in lines)  # a warning, below `error`


def test_no_access_log_unless_asked(stack: Stack, tmp_path: Path) -> None:
    lines = _serve(stack, tmp_path, {})
    assert not any("fleetgate.access" in line for line in lines)
    assert any("WARNING fleetgate.state: circuit open: pa (connect refused" in x for x in lines)


# ---- state changes, through the real server ----------------------------------------------


def _lines(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger]


def test_circuit_open_half_open_and_closed(stack: Stack, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="fleetgate")
    a, b = stack.engine("a"), stack.engine("b")
    no_checks = {"health_check": {"enabled": False}}
    stack.start_gateway(
        {
            "routing": {"circuit": {"cooldown_seconds": 0.2}},
            "providers": [provider("pa", a, **no_checks), provider("pb", b)],
            "deployments": [deployment("m", "pa", priority=0), deployment("m", "pb", priority=1)],
        }
    )
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="k", max_retries=0)
    stack.lt.run(a.stop())
    client.chat.completions.create(model="m", messages=MSG)
    stack.lt.run(a.start())
    wait_until(lambda: stack.gateway.pipeline.state.health("pa").circuit == "half-open", 5)
    client.chat.completions.create(model="m", messages=MSG)  # the probe, which works
    lines = _lines(caplog, "fleetgate.state")
    assert lines[0].startswith("circuit open: pa (connect refused; 1 failure(s) in a row)")
    assert lines[1] == "circuit half-open: pa: a request probes it"
    assert lines[2] == "circuit closed: pa answered a request"
    assert not any(SECRET_PROMPT in r.getMessage() for r in caplog.records)


def test_a_health_check_closes_the_circuit_in_the_log(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="fleetgate")
    a, b = stack.engine("a"), stack.engine("b")
    stack.start_gateway(
        {
            "providers": [
                provider("pa", a, health_check={"interval_seconds": 0.1}),
                provider("pb", b),
            ],
            "deployments": [deployment("m", "pa", priority=0), deployment("m", "pb", priority=1)],
        }
    )
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="k", max_retries=0)
    stack.lt.run(a.stop())
    client.chat.completions.create(model="m", messages=MSG)
    stack.lt.run(a.start())
    wait_until(lambda: stack.gateway.pipeline.state.health("pa").circuit == "closed", 5)
    assert _lines(caplog, "fleetgate.state")[-1] == (
        "circuit closed: pa answered its health check (GET /health)"
    )


def test_a_saturated_pool_is_said_once(stack: Stack, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="fleetgate")
    a = stack.engine("a", latency=0.2)
    stack.start_gateway(
        {
            "providers": [provider("pa", a, max_concurrency=1)],
            "deployments": [deployment("m", "pa")],
        }
    )
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="k", max_retries=0)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda _: client.chat.completions.create(model="m", messages=MSG), range(4)))
    lines = [line for line in _lines(caplog, "fleetgate.execute") if "saturated" in line]
    assert len(lines) == 1
    assert lines[0].startswith("provider pa saturated: all 1 of its connections")


def test_a_discovered_window_change_is_logged(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="fleetgate")
    a = stack.engine("a", context_window=4096)
    stack.start_gateway(
        {
            "providers": [provider("pa", a, discovery=True)],
            "deployments": [deployment("m", "pa", upstream_model="fake-model")],
        }
    )
    wait_until(lambda: stack.gateway.pipeline.discovery.refreshes >= 1, 5, "discovered")
    a.context_window = 2048  # the engine restarted with a smaller window
    stack.lt.run(stack.gateway.pipeline.discovery.refresh())
    stack.lt.run(stack.gateway.pipeline.discovery.refresh())  # unchanged: no second line
    lines = _lines(caplog, "fleetgate.discovery")
    assert lines == [
        "discovered window changed: pa: unknown -> 4096 (api_models)",
        "discovered window changed: pa: 4096 (api_models) -> 2048 (api_models)",
    ]
