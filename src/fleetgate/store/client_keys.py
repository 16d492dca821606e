"""Client keys in the store: created with a secret shown once, kept only as a hash."""

from __future__ import annotations

import os
import time
from typing import Any

from sqlalchemy import Connection, delete, insert, select, update

from fleetgate.auth.keys import ClientKey, hash_secret, new_secret
from fleetgate.store.db import Database
from fleetgate.store.tables import client_keys

EDITABLE = ("name", "allowed_models", "rpm", "tpm", "budget", "disabled")


def _public(row: Any) -> dict[str, Any]:
    data = dict(row._mapping)
    data.pop("key_hash")
    return data


def _by_id(key_id: str) -> Any:
    return select(client_keys).where(client_keys.c.id == key_id)


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


def _insert(conn: Connection, row: dict[str, Any]) -> None:
    conn.execute(insert(client_keys).values(**row))


def _list(conn: Connection) -> list[dict[str, Any]]:
    rows = conn.execute(select(client_keys).order_by(client_keys.c.created_at))
    return [_public(r) for r in rows]


def _get(conn: Connection, key_id: str) -> dict[str, Any] | None:
    row = conn.execute(_by_id(key_id)).first()
    return _public(row) if row else None


def _update(conn: Connection, key_id: str, values: dict[str, Any]) -> dict[str, Any] | None:
    if values:
        conn.execute(update(client_keys).where(client_keys.c.id == key_id).values(**values))
    return _get(conn, key_id)


def _delete(conn: Connection, key_id: str) -> bool:
    return bool(conn.execute(delete(client_keys).where(client_keys.c.id == key_id)).rowcount)


def _add_spend(conn: Connection, spend: dict[str, float]) -> None:
    for key_id, cost in spend.items():
        conn.execute(
            update(client_keys)
            .where(client_keys.c.id == key_id)
            .values(spent=client_keys.c.spent + cost)
        )


def _active(conn: Connection) -> dict[str, ClientKey]:
    rows = conn.execute(select(client_keys).where(client_keys.c.disabled.is_(False)))
    out = {}
    for r in rows:
        allowed = r.allowed_models
        out[r.key_hash] = ClientKey(
            id=r.id,
            name=r.name,
            allowed_models=frozenset(m.lower() for m in allowed) if allowed is not None else None,
            rpm=r.rpm,
            tpm=r.tpm,
            budget=r.budget,
            spent=r.spent,
        )
    return out
