"""The store a command works on: the one `fleetgate serve` with the same config would open."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from sqlalchemy import inspect
from sqlalchemy.exc import SQLAlchemyError

from fleetgate.config import FleetConfig, load_config_file
from fleetgate.config.schema import StorageConfig
from fleetgate.store.database import database_url, open_database, store_unavailable
from fleetgate.store.db import Database

T = TypeVar("T")


def load_optional(config_path: str | None) -> FleetConfig | None:
    return load_config_file(config_path) if config_path else None


def storage_of(config: FleetConfig | None) -> StorageConfig:
    return config.storage if config is not None else StorageConfig()


def store_url(config: FleetConfig | None) -> str:
    """The config's store (env FLEETGATE_DATABASE_URL / FLEETGATE_DATA_DIR override it)."""
    storage = storage_of(config)
    return database_url(storage.database_url, storage.data_dir)


def shown(db: Database) -> str:
    return db.url.render_as_string(hide_password=True)


async def is_empty(db: Database) -> bool:
    """True when the store was never created or has no tables yet (nothing is written)."""
    return await db.run(_is_empty, db)


def _is_empty(db: Database) -> bool:
    path = db.url.database
    if db.dialect.name == "sqlite" and path and path != ":memory:" and not Path(path).exists():
        return True  # connecting would create the file
    with db.engine.connect() as conn:
        return "config_entities" not in inspect(conn).get_table_names()


async def with_store(url: str, work: Callable[[Database], Awaitable[T]]) -> T:
    """Run `work` on the store at `url`; a database failure becomes StoreUnavailable."""
    db = open_database(url)
    try:
        return await work(db)
    except (SQLAlchemyError, OSError) as exc:
        raise store_unavailable(db, exc) from exc
    finally:
        await db.dispose()
