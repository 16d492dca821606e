"""`fleetgate keys create|list|disable|delete`: client keys in the configured store.

Running gateways notice a change as they notice the admin API's: the store's key counter
moves (each process polls it), and with Redis configured a `keys` event goes out at once.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

from fleetgate.commands.store import (
    existing_store_url,
    is_empty,
    load_optional,
    storage_of,
    store_url,
    with_store,
)
from fleetgate.config import FleetConfig
from fleetgate.control.plane import KEYS_VERSION, REDIS_URL_ENV
from fleetgate.store.client_keys import KeyStore
from fleetgate.store.config_store import ConfigStore
from fleetgate.store.database import migrate
from fleetgate.store.db import Database, shown_url
from fleetgate.store.errors import StoreUnavailable


async def _announce(config: FleetConfig | None) -> None:
    url = os.environ.get(REDIS_URL_ENV) or storage_of(config).redis_url
    if not url:
        return
    from fleetgate.state.redis_link import RedisLink

    link = RedisLink(url)
    await link.start()
    link.announce({"type": "keys"})
    await link.stop()  # drains the queued event first


async def _changed(db: Database, config: FleetConfig | None) -> None:
    await ConfigStore(db).bump(KEYS_VERSION)
    await _announce(config)


SPEND_UNIT = "spend and budgets are in the unit of the deployments' `price` (per million tokens)"


def amount(value: float) -> str:
    """A sum of money as people write it: 0.0000042, never 4.2e-06."""
    if value == 0:
        return "0"
    digits = max(2, 3 - int(f"{abs(value):e}".split("e")[1]))  # 3 or 4 significant digits
    return f"{value:.{digits}f}".rstrip("0").rstrip(".")


def _limits(row: dict[str, Any]) -> str:
    parts = [f"{name}={row[name]}" for name in ("rpm", "tpm") if row.get(name) is not None]
    if row.get("budget") is not None:
        parts.append(f"spent {amount(row['spent'])} of budget {amount(row['budget'])}")
    elif row.get("spent"):
        parts.append(f"spent {amount(row['spent'])}")
    return ", ".join(parts) or "-"


def _table(rows: list[dict[str, Any]]) -> str:
    head = ("id", "name", "prefix", "state", "models", "limits", "created")
    body = [
        (
            r["id"],
            r["name"] or "-",
            r["prefix"] + "…",
            "disabled" if r["disabled"] else "active",
            ",".join(r["allowed_models"]) if r["allowed_models"] is not None else "all",
            _limits(r),
            time.strftime("%Y-%m-%d %H:%M", time.localtime(r["created_at"])),
        )
        for r in rows
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body, strict=True)]
    return "\n".join(
        "  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=True)).rstrip()
        for line in (head, *body)
    )


async def _create(db: Database, args: argparse.Namespace, config: FleetConfig | None) -> int:
    models = [m.strip() for m in args.models.split(",") if m.strip()] if args.models else None
    fields = {
        "name": args.name,
        "allowed_models": models,
        "rpm": args.rpm,
        "tpm": args.tpm,
        "budget": args.budget,
    }
    row, secret = await KeyStore(db).create(fields)
    await _changed(db, config)
    print(f"created key {row['id']} ({row['name'] or 'no name'}); its secret, shown this once:")
    print(secret)
    return 0


async def _list(db: Database, args: argparse.Namespace, config: FleetConfig | None) -> int:
    rows = await KeyStore(db).list()
    print(_table(rows) if rows else "no client keys.")
    if any(r.get("spent") or r.get("budget") is not None for r in rows):
        print(f"({SPEND_UNIT})")
    return 0


async def _disable(db: Database, args: argparse.Namespace, config: FleetConfig | None) -> int:
    row = await KeyStore(db).update(args.key_id, {"disabled": not args.enable})
    if row is None:
        print(f"there is no key {args.key_id!r}; `fleetgate keys list` shows them.")
        return 1
    await _changed(db, config)
    print(f"key {row['id']} is {'disabled' if row['disabled'] else 'active'}.")
    return 0


async def _delete(db: Database, args: argparse.Namespace, config: FleetConfig | None) -> int:
    if not await KeyStore(db).delete(args.key_id):
        print(f"there is no key {args.key_id!r}; `fleetgate keys list` shows them.")
        return 1
    await _changed(db, config)
    print(f"key {args.key_id} is deleted.")
    return 0


ACTIONS = {"create": _create, "list": _list, "disable": _disable, "delete": _delete}


def run(args: argparse.Namespace) -> int:
    config = load_optional(args.config)
    action = ACTIONS[args.action]
    url = store_url(config) if config is not None else existing_store_url()
    print(f"store: {shown_url(url)}", file=sys.stderr)  # which one: never a surprise

    async def work(db: Database) -> int:
        await migrate(db)
        return await action(db, args, config)

    return asyncio.run(with_store(url, work))


def auth_key_warning(config: FleetConfig) -> str | None:
    """`fleetgate check`'s word when `auth` is on and the store holds no active client key
    (every proxied request would get 401); read only, nothing is created."""
    if not config.auth.enabled:
        return None

    async def count(db: Database) -> int:
        if await is_empty(db):
            return 0
        return len(await KeyStore(db).active())

    try:
        active = asyncio.run(with_store(store_url(config), count))
    except StoreUnavailable as exc:
        return f"auth is on, and the store's client keys could not be read: {exc}"
    if active:
        return None
    return (
        "auth is on and the store holds no active client key: every proxied request will be "
        "refused (401) until one is made (`fleetgate keys create` or POST /admin/keys)"
    )
