"""Opening the store: the database URL, the connections, and migrations at start-up.

A new, empty store gets its tables from `schema.py`; only a store older than the schema
imports SQLAlchemy and Alembic, to upgrade it (`with_sqlalchemy`).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from fleetgate.store.db import Conn, Database, is_memory
from fleetgate.store.errors import StoreError, StoreUnavailable
from fleetgate.store.schema import SCHEMA_HEAD, VERSION_TABLE, create_statements
from fleetgate.store.sqlite_setup import BUSY_TIMEOUT, register_adapters, set_pragmas, sqlite_path
from fleetgate.store.store_url import POSTGRES_URL

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy import Connection, Engine

T = TypeVar("T")

DATA_DIR_ENV = "FLEETGATE_DATA_DIR"
DATABASE_URL_ENV = "FLEETGATE_DATABASE_URL"
SQLITE_FILE = "fleetgate.db"

# Any constant works; it only has to be the same in every replica.
_MIGRATION_LOCK = 0x666C6565  # "flee"
_MIGRATIONS = Path(__file__).with_name("migrations")

__all__ = ["SCHEMA_HEAD", "Database", "migrate", "open_database"]


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
    # library's sqlite3
    for prefix in ("postgresql://", "postgres://", "postgresql+asyncpg://"):
        if url.startswith(prefix):
            return POSTGRES_URL + url.removeprefix(prefix)
    if url.startswith("sqlite+aiosqlite://"):
        return "sqlite://" + url.removeprefix("sqlite+aiosqlite://")
    if not url.startswith(("sqlite://", POSTGRES_URL)):
        scheme = url.partition("://")[0] or url
        raise StoreUnavailable(
            f"database URL {scheme}://…: fleetgate keeps its store in SQLite "
            "(sqlite:///PATH) or PostgreSQL (postgresql://USER@HOST:PORT/DB); fix "
            f"storage.database_url or {DATABASE_URL_ENV}."
        )
    return url


def store_unavailable(db: Database, exc: Exception) -> StoreUnavailable:
    """A failure to reach or migrate the store, as one line an operator can act on."""
    reason = (str(exc).strip() or type(exc).__name__).splitlines()[0]
    return StoreUnavailable(
        f"cannot open the store at {db.shown_url}: {reason}. Check that the database "
        f"is running and reachable, and storage.database_url / {DATABASE_URL_ENV}."
    )


def open_database(url: str) -> Database:
    """The store at `url` (as `database_url` returns it), its work run in DB threads."""
    return Database(url)


def sqlalchemy_engine(url: str) -> Engine:
    """A SQLAlchemy engine on the store at `url`, for Alembic (imported only here)."""
    from sqlalchemy import create_engine, event

    if url.startswith("sqlite"):
        register_adapters()
        engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
            set_pragmas(dbapi_conn)

        return engine
    return create_engine(url)


async def with_sqlalchemy(db: Database, fn: Callable[..., T], *args: Any) -> T:
    """`fn(connection, *args)` in one transaction of a SQLAlchemy engine on `db`'s store,
    in a DB thread; the engine is gone after it. What the migrations run on."""
    return await db.run(_with_engine, db.url, fn, args)


def _with_engine(url: str, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
    from sqlalchemy.exc import SQLAlchemyError

    engine = sqlalchemy_engine(url)
    try:
        with engine.begin() as connection:
            return fn(connection, *args)
    except SQLAlchemyError as exc:
        raise StoreError(str(getattr(exc, "orig", None) or exc).strip()) from exc
    finally:
        engine.dispose()


def table_names(conn: Conn) -> list[str]:
    """The store's tables (PostgreSQL: in the connection's schema)."""
    if conn.postgres:
        sql = "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
    else:
        sql = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    return [row[0] for row in conn.tuples(sql)]


def _create(conn: Conn) -> bool:
    """A new, empty store gets the tables of `schema.py` and is stamped at SCHEMA_HEAD (the
    "create_all, then stamp head" way Alembic recommends for fresh databases; a test keeps
    the migrations equal to it). False: the store has tables, Alembic upgrades it."""
    if table_names(conn):
        return False
    for sql in create_statements(conn.dialect):
        conn.execute(sql)
    conn.execute(VERSION_TABLE)
    conn.execute("INSERT INTO alembic_version VALUES (:v)", {"v": SCHEMA_HEAD})
    return True


def alembic_upgrade(connection: Connection, revision: str = "head") -> None:
    """Run the migrations up to `revision` on a SQLAlchemy connection (`with_sqlalchemy`)."""
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
    except (StoreError, OSError) as exc:
        raise store_unavailable(db, exc) from exc


async def _migrate(db: Database) -> None:
    if await _at_head(db):
        return
    if db.is_postgres:
        await db.run(_upgrade_postgres, db)
        return
    if is_memory(db.url):
        if not await db.transaction(_create):
            await with_sqlalchemy(db, alembic_upgrade)
        return
    path = sqlite_path(db.url)
    async with _local_lock(path):
        await db.run(_upgrade_sqlite, db, path)


def _upgrade_postgres(db: Database) -> None:
    """Under the advisory lock (held by this transaction): create a new store, or upgrade
    an older one through Alembic on a connection of its own, before the lock goes."""
    with db.connection() as conn:
        conn.execute("SELECT pg_advisory_xact_lock(:k)", {"k": _MIGRATION_LOCK})
        if not _create(conn) and _revision(conn) != SCHEMA_HEAD:
            _with_engine(db.url, alembic_upgrade, ())


def _upgrade_sqlite(db: Database, path: str) -> None:
    with open(path + ".migrate-lock", "a+") as lock_file:  # closing releases the flock
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        with db.connection() as conn:
            created = _create(conn)
            behind = not created and _revision(conn) != SCHEMA_HEAD
        if behind:
            _with_engine(db.url, alembic_upgrade, ())


_LOCAL_LOCKS: dict[str, asyncio.Lock] = {}


def _local_lock(path: str) -> asyncio.Lock:
    # flock does not exclude a second open file in the same process; this lock does
    return _LOCAL_LOCKS.setdefault(path, asyncio.Lock())


async def _at_head(db: Database) -> bool:
    try:
        return await current_revision(db) == SCHEMA_HEAD
    except StoreError:  # no alembic_version table yet: a new store
        return False


async def current_revision(db: Database) -> str | None:
    return await db.read(_revision)


def _revision(conn: Conn) -> str | None:
    value = conn.value("SELECT version_num FROM alembic_version")
    return None if value is None else str(value)


async def prepare(url: str) -> None:
    """Open and migrate the store at `url` once, then close it: what a supervisor runs before
    starting workers, so a store they could not use stops the start with one clear error
    (StoreUnavailable) instead of every worker failing on its own."""
    db = open_database(url)
    try:
        await migrate(db)
    finally:
        await db.dispose()
