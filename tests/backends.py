"""The real PostgreSQL and Redis on this machine, for tests: a fresh database per test.

When either server cannot be reached the tests that need it FAIL: CI must not pass by
silently skipping the shared-state tests (`.ci/run` starts both servers first).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis

PG_URL = os.environ.get("FLEETGATE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("FLEETGATE_TEST_REDIS", "redis://127.0.0.1:6379/0")


def _pg_admin(sql: str) -> None:
    with psycopg.connect(PG_URL, connect_timeout=5, autocommit=True) as conn:
        conn.execute(sql.encode())  # bytes: a query built at run time


def _base(url: str) -> str:
    return url.rsplit("/", 1)[0]


@pytest.fixture(scope="session")
def pg_databases() -> Iterator[list[str]]:
    """The databases the session's tests made, dropped at its end. Not at each test's end:
    fixtures are torn down in the reverse order of their setup, so a test that asks for a
    gateway before `pg_url` would have its database dropped under the running gateway,
    whose shutdown then spends its 10 s trying to write the last log rows."""
    made: list[str] = []
    yield made
    for name in made:
        _pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_url(pg_databases: list[str]) -> str:
    """A new, empty PostgreSQL database for one test."""
    name = "fg_test_" + uuid.uuid4().hex[:12]
    try:
        _pg_admin(f'CREATE DATABASE "{name}"')
    except (OSError, psycopg.Error, TimeoutError) as exc:
        pytest.fail(f"PostgreSQL is not reachable at {PG_URL}: {exc!r} (start it; see .ci/run)")
    pg_databases.append(name)
    return f"{_base(PG_URL)}/{name}"


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'fleetgate.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest) -> str:
    """Each store test runs on SQLite and on the real PostgreSQL."""
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(name))


@pytest.fixture
def redis_url() -> str:
    client = redis.Redis.from_url(REDIS_URL, socket_timeout=5)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis is not reachable at {REDIS_URL}: {exc!r} (start it; see .ci/run)")
    finally:
        client.close()
    return REDIS_URL


@pytest.fixture
def redis_namespace() -> Iterator[str]:
    """Keys and channels of one test, apart from every other test's; removed afterwards."""
    namespace = "fgtest:" + uuid.uuid4().hex[:12]
    yield namespace
    client = redis.Redis.from_url(REDIS_URL, socket_timeout=5)
    try:
        keys = list(client.scan_iter(match=namespace + ":*"))
        if keys:
            client.delete(*keys)
    except redis.RedisError:
        pass  # the test itself reported the outage
    finally:
        client.close()
