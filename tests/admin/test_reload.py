"""Reloading the fleet file (SIGHUP, `POST /admin/reload`): validated whole, swapped
atomically, the change said in the log; an invalid file refused with every problem. And
the start line, and a line for each fleet change saying who made it."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.admin.helpers import ADMIN_KEY, admin, options
from tests.harness import Stack, deployment, provider, wait_until
from tests.test_serve import checkout_env, free_port, ready


def _fleet(stack: Stack, **pa: Any) -> dict[str, Any]:
    a = stack.engines.get("a") or stack.engine("a")
    b = stack.engines.get("b") or stack.engine("b")
    return {
        "providers": [provider("pa", a), provider("pb", b)],
        "deployments": [deployment("m", "pa", **pa), deployment("m", "pb", priority=1)],
    }


INVALID = {
    "deployments": [
        {"model": "m", "provider": "pa", "id": "x1", "context_window": -1},  # not a window
        {"model": "m", "provider": "pb", "id": "x2", "priority": "first"},  # not a number
    ]
}


def test_post_reload_applies_a_valid_file_and_refuses_an_invalid_one(
    stack: Stack, sqlite_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="fleetgate")
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(_fleet(stack)))
    gw = stack.start_gateway(_fleet(stack), options(sqlite_url, config_path=str(path)))
    api = admin(stack)
    version = gw.pipeline.holder.fleet.version

    path.write_text(yaml.safe_dump(_fleet(stack, priority=5)))
    resp = api.post("/admin/reload")
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["version"] == version + 1 and body["fleet_source"] == "file"
    assert body["changes"] == [{"kind": "deployments", "id": "pa", "change": "changed"}]
    assert gw.pipeline.holder.fleet.deployments["pa"].priority == 5
    lines = [r.getMessage() for r in caplog.records if r.name == "fleetgate.control"]
    assert lines[-1] == (
        f"fleet changed by the fleet file (POST /admin/reload) (config version {version} -> "
        f"{version + 1}): changed deployments/pa"
    )

    fleet = _fleet(stack)
    fleet["deployments"] += INVALID["deployments"]
    path.write_text(yaml.safe_dump(fleet))
    refused = api.post("/admin/reload")
    assert refused.status_code == 422
    error = refused.json()["error"]
    assert error["code"] == "invalid_config"
    paths = {p["path"] for p in error["problems"]}
    assert {"deployments[2].context_window", "deployments[3].priority"} <= paths
    assert all(p["line"] for p in error["problems"])  # where in the file
    assert gw.pipeline.holder.fleet.version == version + 1  # nothing changed
    assert gw.pipeline.holder.fleet.deployments["pa"].priority == 5


def test_reload_without_a_file_and_an_admin_change_in_the_log(
    stack: Stack, sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="fleetgate")
    gw = stack.start_gateway(_fleet(stack), options(sqlite_url))
    api = admin(stack)
    resp = api.post("/admin/reload")
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "no_config_file"
    version = gw.pipeline.holder.fleet.version
    assert api.patch("/admin/deployments/pb", json={"priority": 3}).status_code == 200
    lines = [r.getMessage() for r in caplog.records if r.name == "fleetgate.control"]
    assert lines[-1] == (
        f"fleet changed by the admin API (config version {version} -> {version + 1}): "
        "changed deployments/pb"
    )


def test_sighup_reloads_and_the_log_says_so(stack: Stack, tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(_fleet(stack)))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleetgate", "serve", "--config", str(path), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=checkout_env(tmp_path, FLEETGATE_ADMIN_KEY=ADMIN_KEY),
    )
    lines: list[str] = []
    reader = threading.Thread(
        target=lambda: lines.extend(raw.decode().rstrip("\n") for raw in proc.stdout or []),
        daemon=True,
    )
    reader.start()
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}

    def fleet() -> dict[str, Any]:
        return dict(httpx.get(url + "/admin/fleet", headers=headers, timeout=5).json())

    try:
        wait_until(lambda: ready(url), 30, "gateway ready")
        version = fleet()["version"]
        path.write_text(yaml.safe_dump(_fleet(stack, priority=7)))
        proc.send_signal(signal.SIGHUP)
        wait_until(lambda: fleet()["version"] == version + 1, 10, "the file reloaded")
        pa = next(d for d in fleet()["deployments"] if d["id"] == "pa")
        assert pa["priority"] == 7
        invalid = _fleet(stack)
        invalid["deployments"] += INVALID["deployments"]
        path.write_text(yaml.safe_dump(invalid))
        proc.send_signal(signal.SIGHUP)
        wait_until(lambda: any("reload refused" in line for line in lines), 10, "refused")
        assert fleet()["version"] == version + 1  # unchanged
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        reader.join(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    start = next(line for line in lines if " serving " in line)
    assert f"fleetgate 0.1.0 serving http://127.0.0.1:{port} (dashboard " in start
    assert "admin API on; open to any client (auth off); store sqlite:///" in start
    assert start.endswith("): 2 providers, 2 deployments, 1 model")
    assert not any(ADMIN_KEY in line for line in lines)
    assert any(
        f"fleet changed by the fleet file (SIGHUP) (config version {version} -> "
        f"{version + 1}): changed deployments/pa" in line
        for line in lines
    )
    refused = next(line for line in lines if "reload refused" in line)
    assert "deployments[2].context_window" in refused and "deployments[3].priority" in refused
