"""Literal provider credentials are encrypted in the store when FLEETGATE_SECRET_KEY is set,
on SQLite (its file and WAL) and on the real PostgreSQL; without it they are accepted and
warned about; keys rotate by listing the new one first."""

from __future__ import annotations

import logging
from pathlib import Path

import psycopg
import pytest
from cryptography.fernet import Fernet

from fleetgate.config.secrets import SECRET_KEY_ENV
from fleetgate.store.config_store import ConfigStore
from fleetgate.store.database import open_database
from fleetgate.store.secrets import SecretKeyError
from tests.admin.helpers import admin, options
from tests.harness import Stack, deployment, provider
from tests.test_config import run_cli

SECRET = "sk-literal-9f3e1c7a5b"
HEADER_SECRET = "hdr-literal-4d2a8e6f0c"
MSG = [{"role": "user", "content": "hi"}]


def _fleet(stack: Stack) -> dict:
    a = stack.engines.get("a") or stack.engine("a")
    return {"providers": [provider("pa", a)], "deployments": [deployment("m", "pa")]}


def _stored_bytes(db_url: str) -> bytes:
    """Everything the store holds, as bytes: SQLite's file and WAL, or PostgreSQL's rows."""
    if db_url.startswith("sqlite"):
        path = Path(db_url.removeprefix("sqlite:///"))
        files = [path, path.with_name(path.name + "-wal")]
        return b"".join(f.read_bytes() for f in files if f.exists())
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT body::text FROM config_entities UNION ALL SELECT value FROM store_meta"
        ).fetchall()
    return "\n".join(r[0] for r in rows).encode()


def _add_secret_provider(stack: Stack) -> None:
    b = stack.engines.get("b") or stack.engine("b")
    api = admin(stack)
    resp = api.post(
        "/admin/providers",
        json={
            "id": "pb",
            "kind": "vllm",
            "base_url": b.url + "/v1",
            "api_key": SECRET,
            "headers": {"X-Custom-Secret": HEADER_SECRET},
        },
    )
    assert resp.status_code == 201, resp.text
    assert resp.json()["api_key"] == "***" and resp.json()["headers"] == {"X-Custom-Secret": "***"}
    assert api.post("/admin/deployments", json={"model": "n", "provider": "pb"}).status_code == 201


def _served_with_the_secret(stack: Stack, client_for) -> None:
    client_for(stack).chat.completions.create(model="n", messages=MSG)
    sent = {k.lower(): v for k, v in stack.engines["b"].requests[-1].headers.items()}
    assert sent["authorization"] == f"Bearer {SECRET}"
    assert sent["x-custom-secret"] == HEADER_SECRET


def test_literal_credentials_are_encrypted_at_rest(
    stack: Stack, db_url: str, client_for, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET_KEY_ENV, Fernet.generate_key().decode())
    stack.start_gateway(_fleet(stack), options(db_url))
    _add_secret_provider(stack)
    _served_with_the_secret(stack, client_for)
    stored = _stored_bytes(db_url)
    assert b"enc:fernet:" in stored  # the rows are there, sealed
    assert SECRET.encode() not in stored and HEADER_SECRET.encode() not in stored
    status = admin(stack).get("/admin/status").json()
    assert status["warnings"] == []
    stack.stop_gateway()  # a restart reads them back
    stack.start_gateway(_fleet(stack), options(db_url))
    _served_with_the_secret(stack, client_for)


def test_without_a_key_literals_are_kept_and_warned_about(
    stack: Stack,
    sqlite_url: str,
    client_for,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    monkeypatch.delenv(SECRET_KEY_ENV, raising=False)
    config = _fleet(stack)
    config["providers"][0]["api_key"] = SECRET
    with caplog.at_level(logging.WARNING, logger="fleetgate.control"):
        stack.start_gateway(config, options(sqlite_url))
    said = [r.getMessage() for r in caplog.records if "unencrypted" in r.getMessage()]
    assert len(said) == 1 and "provider 'pa': api_key is a literal credential" in said[0]
    assert SECRET_KEY_ENV in said[0] and "${VAR}" in said[0]
    _add_secret_provider(stack)
    _served_with_the_secret(stack, client_for)
    warnings = admin(stack).get("/admin/status").json()["warnings"]
    assert len(warnings) == 2
    assert (
        "provider 'pb': api_key, headers.X-Custom-Secret are literal credentials" in (warnings[1])
    )
    assert SECRET.encode() in _stored_bytes(sqlite_url)  # as before: plain, but said so
    path = tmp_path / "fleet.yaml"
    path.write_text(
        "providers:\n"
        f"  - {{id: p, base_url: 'http://h/v1', api_key: {SECRET}, headers: {{X-A: '${{A}}'}}}}\n"
        "deployments: [{model: m, provider: p}]\n"
    )
    result = run_cli("check", "--config", str(path))
    assert result.returncode == 0
    assert (
        f"{path}:2: warning: providers[0]: provider 'p': api_key is a literal credential, kept "
        "unencrypted in the store" in result.stdout
    )


def test_keys_rotate_with_the_new_one_first(
    stack: Stack, sqlite_url: str, client_for, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    monkeypatch.setenv(SECRET_KEY_ENV, old)
    stack.start_gateway(_fleet(stack), options(sqlite_url))
    _add_secret_provider(stack)
    stack.stop_gateway()

    monkeypatch.setenv(SECRET_KEY_ENV, f"{new},{old}")  # the start reseals under `new`
    stack.start_gateway(_fleet(stack), options(sqlite_url))
    _served_with_the_secret(stack, client_for)
    stack.stop_gateway()

    monkeypatch.setenv(SECRET_KEY_ENV, new)  # the old key is no longer needed
    stack.start_gateway(_fleet(stack), options(sqlite_url))
    _served_with_the_secret(stack, client_for)
    assert SECRET.encode() not in _stored_bytes(sqlite_url)
    stack.stop_gateway()

    monkeypatch.setenv(SECRET_KEY_ENV, old)  # a wrong key is refused, naming the variable
    db = open_database(sqlite_url)
    with pytest.raises(SecretKeyError, match=f"does not open with {SECRET_KEY_ENV}"):
        stack.lt.run(ConfigStore(db).entities())
    stack.lt.run(db.dispose())
