"""Client keys in the store: created with a secret shown once, kept only as a hash."""

from __future__ import annotations

import os
import time
from typing import Any

from fleetgate.auth.keys import ClientKey, hash_secret, new_secret
from fleetgate.store.db import Conn, Database, json_text

EDITABLE = ("name", "allowed_models", "rpm", "tpm", "budget", "disabled")


def _public(row: dict[str, Any]) -> dict[str, Any]:
    row.pop("key_hash")
    return row


class KeyStore:
    """Each method is one function of a connection, run whole in a DB thread."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def create(self, fields: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """A new key; returns its row and the secret, which is never readable again."""
        secret = new_secret()
        row = {
            "id": "key_" + os.urandom(8).hex(),
            "name": fields.get("name") or "",
            "key_hash": hash_secret(secret),
            "prefix": secret[:10],
            "allowed_models": fields.get("allowed_models"),
            "rpm": fields.get("rpm"),
            "tpm": fields.get("tpm"),
            "budget": fields.get("budget"),
            "spent": 0.0,
            "disabled": bool(fields.get("disabled", False)),
            "created_at": time.time(),
        }
        await self.db.transaction(_insert, row)
        row.pop("key_hash")
        return row, secret

    async def list(self) -> list[dict[str, Any]]:
        return await self.db.read(_list)

    async def get(self, key_id: str) -> dict[str, Any] | None:
        return await self.db.read(_get, key_id)

    async def update(self, key_id: str, fields: dict[str, Any]) -> dict[str, Any] | None:
        values = {k: v for k, v in fields.items() if k in EDITABLE}
        return await self.db.transaction(_update, key_id, values)

    async def delete(self, key_id: str) -> bool:
        return await self.db.transaction(_delete, key_id)

    async def add_spend(self, spend: dict[str, float]) -> None:
        await self.db.transaction(_add_spend, spend)

    async def active(self) -> dict[str, ClientKey]:
        """Every enabled key by hash, for the key ring."""
        return await self.db.read(_active)


def _bound(values: dict[str, Any]) -> dict[str, Any]:
    """`values` as the statements bind them (the model list as JSON)."""
    if "allowed_models" in values:
        values = {**values, "allowed_models": json_text(values["allowed_models"])}
    return values


def _insert(conn: Conn, row: dict[str, Any]) -> None:
    names = list(row)  # `KeyStore.create`'s: every column of the table
    conn.execute(
        f"INSERT INTO client_keys ({', '.join(names)}) "
        f"VALUES ({', '.join(':' + n for n in names)})",
        _bound(row),
    )


def _list(conn: Conn) -> list[dict[str, Any]]:
    return [_public(r) for r in conn.rows("SELECT * FROM client_keys ORDER BY created_at")]


def _get(conn: Conn, key_id: str) -> dict[str, Any] | None:
    rows = conn.rows("SELECT * FROM client_keys WHERE id = :id", {"id": key_id})
    return _public(rows[0]) if rows else None


def _update(conn: Conn, key_id: str, values: dict[str, Any]) -> dict[str, Any] | None:
    if values:
        # the names come from EDITABLE, never from the request
        sets = ", ".join(f"{name} = :{name}" for name in values if name in EDITABLE)
        conn.execute(
            f"UPDATE client_keys SET {sets} WHERE id = :key_id",
            {**_bound(values), "key_id": key_id},
        )
    return _get(conn, key_id)


def _delete(conn: Conn, key_id: str) -> bool:
    return bool(conn.count("DELETE FROM client_keys WHERE id = :id", {"id": key_id}))


def _add_spend(conn: Conn, spend: dict[str, float]) -> None:
    for key_id, cost in spend.items():
        conn.execute(
            "UPDATE client_keys SET spent = spent + :cost WHERE id = :id",
            {"cost": cost, "id": key_id},
        )


def _active(conn: Conn) -> dict[str, ClientKey]:
    out = {}
    for r in conn.rows("SELECT * FROM client_keys WHERE disabled = :no", {"no": False}):
        allowed = r["allowed_models"]
        out[r["key_hash"]] = ClientKey(
            id=r["id"],
            name=r["name"],
            allowed_models=frozenset(m.lower() for m in allowed) if allowed is not None else None,
            rpm=r["rpm"],
            tpm=r["tpm"],
            budget=r["budget"],
            spent=r["spent"],
        )
    return out
