"""Opening the store: the database URL, the engine, and migrations at start-up."""

from __future__ import annotations

import asyncio
import fcntl
import os
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, event, inspect, text
from sqlalchemy import create_engine as _sa_create_engine
from sqlalchemy.exc import SQLAlchemyError

from fleetgate.store.db import Database
from fleetgate.store.errors import StoreUnavailable
from fleetgate.store.sqlite_setup import BUSY_TIMEOUT, register_adapters, set_pragmas

if TYPE_CHECKING:
    from alembic.config import Config

DATA_DIR_ENV = "FLEETGATE_DATA_DIR"
DATABASE_URL_ENV = "FLEETGATE_DATABASE_URL"
SQLITE_FILE = "fleetgate.db"

# Any constant works; it only has to be the same in every replica.
_MIGRATION_LOCK = 0x666C6565  # "flee"
_MIGRATIONS = Path(__file__).with_name("migrations")


def data_dir(configured: str | None = None) -> Path:
    return Path(os.environ.get(DATA_DIR_ENV) or configured or "./data")


def database_url(
    configured: str | None = None, data_directory: str | None = None, explicit: str | None = None
) -> str:
    """The URL to use: `explicit`, then env, then config, then SQLite under the data dir."""
    url = explicit or os.environ.get(DATABASE_URL_ENV) or configured
    if not url:
        directory = data_dir(data_directory)
        directory.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{(directory / SQLITE_FILE).resolve()}"
    # PostgreSQL URLs without a driver get the one this package ships with (psycopg 3), as
    # do URLs naming the async drivers of earlier versions; SQLite's driver is the standard
    # library's sqlite3, SQLAlchemy's default
    for prefix in ("postgresql://", "postgres://", "postgresql+asyncpg://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url.removeprefix(prefix)
    if url.startswith("sqlite+aiosqlite://"):
        return "sqlite://" + url.removeprefix("sqlite+aiosqlite://")
    if not url.startswith(("sqlite://", "postgresql+psycopg://")):
        scheme = url.partition("://")[0] or url
        raise StoreUnavailable(
            f"database URL {scheme}://…: fleetgate keeps its store in SQLite "
            "(sqlite:///PATH) or PostgreSQL (postgresql://USER@HOST:PORT/DB); fix "
            f"storage.database_url or {DATABASE_URL_ENV}."
        )
    return url


def store_unavailable(db: Database, exc: Exception) -> StoreUnavailable:
    """A failure to reach or migrate the store, as one line an operator can act on."""
    reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
    where = db.url.render_as_string(hide_password=True)
    return StoreUnavailable(
        f"cannot open the store at {where}: {reason}. Check that the database is running "
        f"and reachable, and storage.database_url / {DATABASE_URL_ENV}."
    )


def open_database(url: str) -> Database:
    """The store at `url` (as `database_url` returns it), its work run in DB threads."""
    return Database(create_engine(url))


def create_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        register_adapters()
        engine = _sa_create_engine(url, connect_args={"timeout": BUSY_TIMEOUT})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
            set_pragmas(dbapi_conn)

        return engine
    return _sa_create_engine(url, pool_size=5, max_overflow=5, pool_pre_ping=True)


# The newest migration's revision. A store already there skips Alembic entirely (importing
# and running it costs ~0.2 s of start-up); a test keeps this equal to Alembic's head.
SCHEMA_HEAD = "0004"


def _upgrade(connection: Connection) -> None:
    """A new, empty store gets the tables of tables.py and is stamped at SCHEMA_HEAD (the
    "create_all, then stamp head" way Alembic recommends for fresh databases; a test keeps
    the migrations equal to tables.py). A store with tables is upgraded by Alembic."""
    if not inspect(connection).get_table_names():
        from fleetgate.store.tables import metadata

        metadata.create_all(connection)
        connection.execute(
            text(
                "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL, "
                "CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num))"
            )
        )
        connection.execute(text("INSERT INTO alembic_version VALUES (:v)"), {"v": SCHEMA_HEAD})
        return
    alembic_upgrade(connection)


def alembic_upgrade(connection: Connection, revision: str = "head") -> None:
    """Run the migrations up to `revision` (imported only when a store needs it)."""
    from alembic import command

    command.upgrade(alembic_config(connection), revision)


def alembic_config(connection: Connection) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    config.attributes["connection"] = connection
    return config


async def migrate(db: Database) -> None:
    """Bring the schema to the newest revision; StoreUnavailable (one line an operator can
    act on) when the database cannot be reached or migrated.

    Replicas that start at the same moment are serialised: the first one migrates, the
    others wait, then find nothing left to do. PostgreSQL uses a transaction-scoped
    advisory lock; SQLite (whose DDL is not transactional here) an exclusive lock on a
    file next to the database, held until the migration has committed.
    """
    try:
        await _migrate(db)
    except (SQLAlchemyError, OSError) as exc:
        raise store_unavailable(db, exc) from exc


async def _migrate(db: Database) -> None:
    if await _at_head(db):
        return
    if db.is_postgres:
        await db.transaction(_upgrade_locked)
        return
    path = db.url.database
    if not path or path == ":memory:":
        await db.transaction(_upgrade)
        return
    async with _local_lock(path):
        await db.run(_upgrade_sqlite, db.engine, path)


def _upgrade_locked(connection: Connection) -> None:
    connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK})
    _upgrade(connection)


def _upgrade_sqlite(engine: Engine, path: str) -> None:
    with open(path + ".migrate-lock", "a+") as lock_file:  # closing releases the flock
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        with engine.begin() as connection:
            _upgrade(connection)


_LOCAL_LOCKS: dict[str, asyncio.Lock] = {}


def _local_lock(path: str) -> asyncio.Lock:
    # flock does not exclude a second open file in the same process; this lock does
    return _LOCAL_LOCKS.setdefault(path, asyncio.Lock())


async def _at_head(db: Database) -> bool:
    try:
        return await current_revision(db) == SCHEMA_HEAD
    except Exception:  # no alembic_version table yet: a new store
        return False


async def current_revision(db: Database) -> str | None:
    return await db.read(_revision)


def _revision(connection: Connection) -> str | None:
    row = connection.execute(text("SELECT version_num FROM alembic_version")).first()
    return row[0] if row else None


async def prepare(url: str) -> None:
    """Open and migrate the store at `url` once, then close it: what a supervisor runs before
    starting workers, so a store they could not use stops the start with one clear error
    (StoreUnavailable) instead of every worker failing on its own."""
    db = open_database(url)
    try:
        await migrate(db)
    finally:
        await db.dispose()
