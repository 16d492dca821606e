"""Unset secrets are said out loud: `check` warns of an unset `admin.key` variable and of
`auth` on with no client key; `serve` says at start that the admin API is off, and the
admin-off answer names FLEETGATE_ADMIN_KEY."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest

from fleetgate.control.plane import ControlOptions
from tests.harness import Stack, deployment, provider
from tests.test_config import run_cli


def test_check_warns_of_an_unset_admin_key_and_of_auth_without_a_client_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FLEETGATE_ADMIN_KEY", raising=False)
    monkeypatch.delenv("FG_UNSET_ADMIN_KEY", raising=False)
    path = tmp_path / "fleet.yaml"
    path.write_text(
        "admin:\n"
        "  key: ${FG_UNSET_ADMIN_KEY}\n"
        "auth: {enabled: true}\n"
        f"storage: {{database_url: 'sqlite:///{tmp_path / 'store.db'}'}}\n"
        "providers: [{id: p, base_url: 'http://h/v1'}]\n"
        "deployments: [{model: m, provider: p}]\n"
    )
    result = run_cli("check", "--config", str(path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert (
        f"{path}:2: warning: admin.key: env var FG_UNSET_ADMIN_KEY is not set; the admin API "
        "and the dashboard are off until it (or FLEETGATE_ADMIN_KEY) is" in lines
    )
    auth = [line for line in lines if "auth.enabled" in line]
    assert len(auth) == 1 and auth[0].startswith(f"{path}:3: warning: auth.enabled: auth is on")
    assert "no active client key" in auth[0]
    assert not (tmp_path / "store.db").exists()  # check only reads
    assert run_cli("keys", "create", "--config", str(path), "--name", "app").returncode == 0
    result = run_cli("check", "--config", str(path))
    assert "auth.enabled" not in result.stdout  # a key exists now
    monkeypatch.setenv("FG_UNSET_ADMIN_KEY", "set-now")
    assert "admin.key" not in run_cli("check", "--config", str(path)).stdout


def test_serve_says_the_admin_api_is_off_and_how_to_turn_it_on(
    stack: Stack,
    sqlite_url: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.delenv("FLEETGATE_ADMIN_KEY", raising=False)
    monkeypatch.delenv("FG_UNSET_ADMIN_KEY", raising=False)
    engine = stack.engine("a")
    config = {
        "admin": {"key": "${FG_UNSET_ADMIN_KEY}"},
        "providers": [provider("pa", engine)],
        "deployments": [deployment("m", "pa")],
    }
    with caplog.at_level(logging.WARNING, logger="fleetgate.control"):
        stack.start_gateway(config, ControlOptions(database_url=sqlite_url))
    said = [r.getMessage() for r in caplog.records if "admin API" in r.getMessage()]
    assert said == [
        "the admin API and the dashboard are off: admin.key names FG_UNSET_ADMIN_KEY, which is "
        "not set; set FLEETGATE_ADMIN_KEY (or admin.key) and restart"
    ]
    for method, path in (("GET", "/admin/status"), ("POST", "/v1/fleet/windows/refresh")):
        resp = httpx.request(method, stack.url + path, timeout=10)
        assert resp.status_code == 403
        error = resp.json()["error"]
        assert error["code"] == "admin_disabled"
        assert "FLEETGATE_ADMIN_KEY" in error["message"]
