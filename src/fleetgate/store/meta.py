"""`store_meta`: the store's small facts, one text value per key (whether the YAML seeded
the store, the config version, change counters, the calibration's and the fingerprints'
JSON)."""

from __future__ import annotations

from fleetgate.store.db import Conn


def get_meta(conn: Conn, key: str) -> str | None:
    """The value of `key`; None when its row is not there."""
    value = conn.value('SELECT value FROM store_meta WHERE "key" = :key', {"key": key})
    return None if value is None else str(value)


def insert_meta(conn: Conn, key: str, value: str) -> None:
    """A new row (RowConflict when another writer made it first)."""
    sql = 'INSERT INTO store_meta ("key", value) VALUES (:key, :value)'
    conn.execute(sql, {"key": key, "value": value})


def put_meta(conn: Conn, key: str, value: str) -> None:
    """Set the value of `key`, its row made when it is not there (RowConflict when another
    writer made it meanwhile)."""
    sql = 'UPDATE store_meta SET value = :value WHERE "key" = :key'
    if not conn.count(sql, {"key": key, "value": value}):
        insert_meta(conn, key, value)
