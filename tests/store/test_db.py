"""The store's connections (`store/db.py`) on SQLite and the real PostgreSQL: values come
back as they went in, a driver's error comes out as the store's own, a failed statement
leaves the connection usable, and a connection the server dropped is replaced."""

from __future__ import annotations

import psycopg
import pytest

from fleetgate.store.client_keys import KeyStore
from fleetgate.store.database import database_url, migrate, open_database
from fleetgate.store.db import Conn, _pyformat, json_text, shown_url
from fleetgate.store.errors import RowConflict, RowRejected, StoreError


def test_parameters_become_psycopgs_and_casts_stay() -> None:
    sql = "SELECT :a::text, x % 2 FROM t WHERE k = :key_1 AND y = ':not'"
    assert _pyformat(sql) == "SELECT %(a)s::text, x %% 2 FROM t WHERE k = %(key_1)s AND y = ':not'"


def test_a_shown_url_has_no_password() -> None:
    url = "postgresql+psycopg://fleet:s3cret@db.internal:5432/gw"
    assert shown_url(url) == "postgresql+psycopg://fleet:***@db.internal:5432/gw"
    assert "s3cret" not in shown_url(url)
    assert shown_url("sqlite:////var/lib/fleetgate.db") == "sqlite:////var/lib/fleetgate.db"


async def test_values_round_trip_and_errors_are_the_stores(db_url: str) -> None:
    db = open_database(database_url(db_url))
    try:
        await migrate(db)
        keys = KeyStore(db)
        row, _secret = await keys.create({"name": "ci", "allowed_models": ["m", "n"], "rpm": 5})
        got = await keys.get(row["id"])
        assert got is not None
        # JSON and Boolean columns come back as such on both databases
        assert got["allowed_models"] == ["m", "n"] and got["disabled"] is False
        assert got["rpm"] == 5 and got["budget"] is None

        # a JSON body with an integer beyond 64 bits (a schema-valid config value) is kept
        # exactly
        huge = {"max_concurrency": 2**64 + 1, "name": "p"}

        def put(conn: Conn) -> None:
            conn.execute(
                "INSERT INTO config_entities (kind, id, position, body, updated_at) "
                "VALUES ('providers', 'p', 0, :body, 0)",
                {"body": json_text(huge)},
            )

        await db.transaction(put)
        read = await db.read(lambda c: c.rows("SELECT body FROM config_entities"))
        assert read == [{"body": huge}]

        def duplicate(conn: Conn) -> None:
            conn.execute("INSERT INTO store_meta (\"key\", value) VALUES ('k', '1'), ('k', '2')")

        with pytest.raises(RowConflict):
            await db.transaction(duplicate)
        with pytest.raises(StoreError) as missing:
            await db.read(lambda c: c.value("SELECT x FROM no_such_table"))
        assert type(missing.value) is StoreError and "no_such_table" in str(missing.value)
        # the failed transactions left nothing behind, and the connections work on
        assert await db.read(lambda c: c.value("SELECT COUNT(*) FROM store_meta")) == 0
        assert await keys.update(row["id"], {"disabled": True}) is not None
        assert (await keys.active()) == {}
        if db.is_postgres:  # SQLite keeps any length in a VARCHAR
            with pytest.raises(RowRejected):
                await keys.update(row["id"], {"name": "x" * 300})
    finally:
        await db.dispose()


async def test_a_connection_the_server_dropped_is_replaced(pg_url: str) -> None:
    """PostgreSQL restarted, or an idle connection cut: the next operation opens a new
    connection instead of failing (the check before each use)."""
    db = open_database(database_url(pg_url))
    try:
        await migrate(db)
        pids = {await db.read(lambda c: c.value("SELECT pg_backend_pid()")) for _ in range(6)}
        with psycopg.connect(pg_url, autocommit=True) as admin:
            for pid in pids:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        after = {await db.read(lambda c: c.value("SELECT pg_backend_pid()")) for _ in range(6)}
        assert after and not after & pids
        assert await KeyStore(db).list() == []
    finally:
        await db.dispose()
