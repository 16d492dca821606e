"""`fleetgate keys create|list|disable|delete` on the configured store, with a gateway running."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
import yaml

from fleetgate.cli import main
from tests.admin.helpers import options, two_tier_fleet
from tests.harness import Stack, wait_until


def _status(stack: Stack, secret: str) -> int:
    return httpx.post(
        stack.url + "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": f"Bearer {secret}"},
        timeout=10,
    ).status_code


def _keys(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["keys", *argv])
    return code, capsys.readouterr().out


def test_keys_from_the_command_line_reach_a_running_gateway(
    stack: Stack,
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = {**two_tier_fleet(stack), "auth": {"enabled": True}}
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump({**config, "storage": {"database_url": db_url}}))
    stack.start_gateway(config, options(db_url))

    code, out = _keys(capsys, "create", "--config", str(path), "--name", "ci", "--models", "m")
    assert code == 0, out
    found = re.search(
        r"created key (key_[0-9a-f]+) \(ci\); its secret, shown this once:\n(\S+)", out
    )
    assert found, out
    key_id, secret = found.groups()
    wait_until(lambda: _status(stack, secret) == 200, 5, "the gateway accepts the new key")

    code, out = _keys(capsys, "--config", str(path), "list", "--config", str(path))
    assert code == 0
    assert key_id in out and secret[:10] + "…" in out and "active" in out
    assert secret not in out  # shown once, at creation only

    assert _keys(capsys, "disable", key_id, "--config", str(path))[0] == 0
    wait_until(lambda: _status(stack, secret) == 401, 5, "the gateway refuses the disabled key")
    assert "disabled" in _keys(capsys, "list", "--config", str(path))[1]

    assert _keys(capsys, "disable", "--enable", key_id, "--config", str(path))[0] == 0
    wait_until(lambda: _status(stack, secret) == 200, 5, "enabled again")

    code, out = _keys(capsys, "delete", key_id, "--config", str(path))
    assert code == 0 and f"key {key_id} is deleted." in out
    wait_until(lambda: _status(stack, secret) == 401, 5, "the deleted key is refused")
    assert _keys(capsys, "list", "--config", str(path))[1].strip() == "no client keys."
    code, out = _keys(capsys, "delete", key_id, "--config", str(path))
    assert code == 1 and "there is no key" in out


def test_keys_create_validates_its_limits(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["keys", "create", "--rpm", "0"])
    assert exited.value.code == 2
    assert "--rpm: must be at least 1" in capsys.readouterr().err
