"""The store a command works on: the one `fleetgate serve` with the same config would open."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from fleetgate.config import FleetConfig, load_config_file
from fleetgate.config.schema import StorageConfig
from fleetgate.store.database import (
    DATA_DIR_ENV,
    DATABASE_URL_ENV,
    SQLITE_FILE,
    data_dir,
    database_url,
    open_database,
    store_unavailable,
    table_names,
)
from fleetgate.store.db import Conn, Database
from fleetgate.store.errors import StoreError, StoreUnavailable
from fleetgate.store.sqlite_setup import sqlite_path

T = TypeVar("T")


def load_optional(config_path: str | None) -> FleetConfig | None:
    return load_config_file(config_path) if config_path else None


def storage_of(config: FleetConfig | None) -> StorageConfig:
    return config.storage if config is not None else StorageConfig()


def store_url(config: FleetConfig | None) -> str:
    """The config's store (env FLEETGATE_DATABASE_URL / FLEETGATE_DATA_DIR override it)."""
    storage = storage_of(config)
    return database_url(storage.database_url, storage.data_dir)


def existing_store_url() -> str:
    """The store a command without `--config` works on: the one FLEETGATE_DATABASE_URL
    names, else the SQLite store under the data directory when it exists. Never a new
    one: keys made in a store no gateway reads would be refused by every gateway."""
    if os.environ.get(DATABASE_URL_ENV):
        return database_url()
    path = (data_dir() / SQLITE_FILE).resolve()
    if not path.is_file():
        raise StoreUnavailable(
            f"no store to use: no --config was given, {DATABASE_URL_ENV} is not set and "
            f"there is no store at {path}. Pass the gateway's fleet file with --config, or "
            f"set {DATABASE_URL_ENV} (or {DATA_DIR_ENV}) to the store the gateway uses."
        )
    return database_url()


async def is_empty(db: Database) -> bool:
    """True when the store was never created or has no tables yet (nothing is written)."""
    if not db.is_postgres and not await db.run(_exists, sqlite_path(db.url)):
        return True  # connecting would create the file
    return await db.read(_is_empty)


def _exists(path: str) -> bool:
    return Path(path).exists()


def _is_empty(conn: Conn) -> bool:
    return "config_entities" not in table_names(conn)


async def with_store(url: str, work: Callable[[Database], Awaitable[T]]) -> T:
    """Run `work` on the store at `url`; a database failure becomes StoreUnavailable."""
    db = open_database(url)
    try:
        return await work(db)
    except (StoreError, OSError) as exc:
        raise store_unavailable(db, exc) from exc
    finally:
        await db.dispose()
