from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from fleetgate.config.loader import ConfigError
from fleetgate.store.config_store import ConfigStore, compose_or_raise, find
from fleetgate.store.database import (
    SCHEMA_HEAD,
    alembic_upgrade,
    current_revision,
    database_url,
    migrate,
    open_database,
    table_names,
    with_sqlalchemy,
)
from tests.harness import fleet_config

BASE = {
    "server": {"port": 9999},
    "providers": [{"id": "pa", "base_url": "http://127.0.0.1:1/v1"}],
    "deployments": [
        {"model": "m", "provider": "pa", "context_window": 4096},
        {"id": "long", "model": "m", "provider": "pa", "context_window": 100_000},
    ],
}


async def test_migrations_create_the_tables_and_are_idempotent(db_url: str) -> None:
    db = open_database(database_url(db_url))
    try:
        # several replicas starting at once: every upgrade must succeed
        await asyncio.gather(*(migrate(db) for _ in range(3)))
        await migrate(db)
        assert await current_revision(db) == SCHEMA_HEAD
        names = set(await db.read(table_names))
        assert {"config_entities", "requests", "client_keys"} <= names
    finally:
        await db.dispose()


async def test_seed_once_then_edits_persist(db_url: str) -> None:
    db = open_database(database_url(db_url))
    try:
        await migrate(db)
        store = ConfigStore(db)
        base = fleet_config(BASE)
        assert await store.seed(base) is True
        assert await store.seed(base) is False  # seeding happens once
        entities = await store.entities()
        # deployment ids are pinned at seed time; unset defaults are not stored
        assert [b["id"] for b in entities["deployments"]] == ["pa/m", "long"]
        assert "weight" not in entities["deployments"][0]

        def patch(e):  # type: ignore[no-untyped-def]
            e["deployments"][1]["context_window"] = 200_000
            return e

        version, config = await store.change(patch, lambda e: compose_or_raise(base, e))
        assert version == 2
        assert config.server.port == 9999
        assert config.deployments[1].context_window == 200_000

        def bad(e):  # type: ignore[no-untyped-def]
            e["deployments"][0]["provider"] = "nope"
            return e

        with pytest.raises(ConfigError, match="unknown provider"):
            await store.change(bad, lambda e: compose_or_raise(base, e))
        after = await store.entities()
        assert find(after, "deployments", "pa/m")[1]["provider"] == "pa"  # type: ignore[index]
        assert find(after, "deployments", "long")[1]["context_window"] == 200_000  # type: ignore[index]
        assert await store.version() == 2
    finally:
        await db.dispose()


async def test_migrations_match_the_table_definitions(db_url: str) -> None:
    """tables.py (what the code uses) and the migrations (what databases get) agree."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from fleetgate.store.tables import metadata

    db = open_database(database_url(db_url))
    try:
        await with_sqlalchemy(db, alembic_upgrade)  # the migrations themselves
        diff = await with_sqlalchemy(
            db, lambda c: compare_metadata(MigrationContext.configure(c), metadata)
        )
        assert diff == []
    finally:
        await db.dispose()


def test_schema_head_constant_is_alembics_head() -> None:
    """`migrate` skips Alembic when the store is at SCHEMA_HEAD: it must be the real head."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from fleetgate.store import database

    config = Config()
    config.set_main_option("script_location", str(database._MIGRATIONS))
    assert ScriptDirectory.from_config(config).get_current_head() == database.SCHEMA_HEAD


async def test_a_new_store_is_created_and_stamped_without_alembic(db_url: str) -> None:
    """A fresh store gets schema.py's tables, equal to tables.py's (Alembic compares them),
    and the head revision; Alembic then finds nothing to do, which proves the stamp is
    right."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from fleetgate.store.tables import metadata

    db = open_database(database_url(db_url))
    try:
        await migrate(db)
        assert await current_revision(db) == SCHEMA_HEAD
        diff = await with_sqlalchemy(
            db, lambda c: compare_metadata(MigrationContext.configure(c), metadata)
        )
        assert diff == []
        await with_sqlalchemy(db, alembic_upgrade)
        assert await current_revision(db) == SCHEMA_HEAD
    finally:
        await db.dispose()


async def test_a_store_behind_the_schema_is_upgraded_by_alembic(db_url: str) -> None:
    """A store an older version made (here at revision 0004, without the request notes)
    is brought to the head by `migrate`, and the code reads and writes it after."""
    db = open_database(database_url(db_url))
    try:
        await with_sqlalchemy(db, alembic_upgrade, "0004")
        assert await current_revision(db) == "0004"
        await migrate(db)
        assert await current_revision(db) == SCHEMA_HEAD
        store = ConfigStore(db)
        assert await store.seed(fleet_config(BASE)) is True
        assert [b["id"] for b in (await store.entities())["deployments"]] == ["pa/m", "long"]
    finally:
        await db.dispose()


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_the_new_stores_statements_are_what_sqlalchemy_makes_of_tables_py(dialect: str) -> None:
    """schema.py (what a new store gets, without SQLAlchemy) says what tables.py (what the
    migrations upgrade to) says, statement by statement."""
    import re

    from sqlalchemy.dialects import postgresql, sqlite
    from sqlalchemy.schema import CreateIndex, CreateTable

    from fleetgate.store.schema import BOOLEAN_COLUMNS, JSON_COLUMNS, create_statements
    from fleetgate.store.tables import metadata

    def plain(sql: str) -> str:
        return re.sub(r"\s+", " ", sql).replace("( ", "(").replace(" )", ")").strip()

    compiler = {"sqlite": sqlite.dialect(), "postgresql": postgresql.dialect()}[dialect]
    expected = []
    for table in metadata.sorted_tables:
        expected.append(plain(str(CreateTable(table).compile(dialect=compiler))))
        for index in sorted(table.indexes, key=lambda i: str(i.name)):
            expected.append(plain(str(CreateIndex(index).compile(dialect=compiler))))
    quoted = [sql.replace('"', "") for sql in create_statements(dialect)]
    assert quoted == [sql.replace('"', "") for sql in expected]
    columns = [c for t in metadata.sorted_tables for c in t.columns]
    assert {c.name for c in columns if type(c.type).__name__ == "JSON"} == JSON_COLUMNS
    assert {c.name for c in columns if type(c.type).__name__ == "Boolean"} == BOOLEAN_COLUMNS


def test_database_urls_get_the_shipped_drivers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """psycopg 3 for PostgreSQL, the standard library's sqlite3 for SQLite; URLs naming the
    async drivers of earlier versions keep working."""
    pg = "postgresql+psycopg://u@h:5432/db"
    for url in (
        "postgresql://u@h:5432/db",
        "postgres://u@h:5432/db",
        "postgresql+asyncpg://u@h:5432/db",
    ):
        assert database_url(explicit=url) == pg
    assert database_url(explicit="sqlite:////x/f.db") == "sqlite:////x/f.db"
    assert database_url(explicit="sqlite+aiosqlite:////x/f.db") == "sqlite:////x/f.db"
    monkeypatch.delenv("FLEETGATE_DATABASE_URL", raising=False)
    monkeypatch.delenv("FLEETGATE_DATA_DIR", raising=False)
    default = database_url(data_directory=str(tmp_path))
    assert default == f"sqlite:///{(tmp_path / 'fleetgate.db').resolve()}"


async def test_concurrent_edits_from_two_processes_lose_nothing(db_url: str) -> None:
    """Two replicas (two engines on one store) edit one deployment at the same moment: the
    second edit must see the first one's result, never overwrite it with what it read."""
    import threading

    first_db = open_database(database_url(db_url))
    second_db = open_database(database_url(db_url))
    try:
        await migrate(first_db)
        base = fleet_config(BASE)
        await ConfigStore(first_db).seed(base)
        second_read = threading.Event()
        first_checking = threading.Event()

        def set_on_long(field: str, value: int, note: threading.Event | None = None):  # type: ignore[no-untyped-def]
            def edit(e):  # type: ignore[no-untyped-def]
                if note is not None:
                    note.set()
                find(e, "deployments", "long")[1][field] = value  # type: ignore[index]
                return e

            return edit

        def slow_check(e):  # type: ignore[no-untyped-def]
            # hold the first edit open; if the second could read the store meanwhile, it
            # reads it now (serialised edits make it wait for this one's commit instead)
            first_checking.set()
            second_read.wait(timeout=1.0)
            return compose_or_raise(base, e)

        first = asyncio.ensure_future(
            ConfigStore(first_db).change(set_on_long("context_window", 200_000), slow_check)
        )
        assert await asyncio.to_thread(first_checking.wait, 10), "first edit never ran"
        second = ConfigStore(second_db).change(
            set_on_long("priority", 5, second_read), lambda e: compose_or_raise(base, e)
        )
        versions = sorted(v for v, _ in await asyncio.gather(first, second))
        assert versions == [2, 3]
        long = find(await ConfigStore(first_db).entities(), "deployments", "long")[1]  # type: ignore[index]
        assert (long["context_window"], long["priority"]) == (200_000, 5)
    finally:
        await first_db.dispose()
        await second_db.dispose()
