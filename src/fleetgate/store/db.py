"""The one bridge from async code to the store: the database driver itself (the standard
library's sqlite3, or psycopg for PostgreSQL), its work run in a few threads of its own.

Each store operation is one plain function of a `Conn`, run whole in a DB thread
(`transaction`: committed when it returns, rolled back when it raises; `read`: rolled back
after it): one hop from the event loop per operation. Each thread keeps its own
connection. A statement names its parameters `:name`, as sqlite3 takes them; for psycopg
they become `%(name)s`.

No SQLAlchemy here, nor anywhere the serving process goes (`database.py` imports it only
to upgrade a store older than the schema): it was about 15 MB of the serving process's
80 MB budget, and about a quarter of its start.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import orjson

from fleetgate.store.errors import RowConflict, RowRejected, StoreError
from fleetgate.store.schema import BOOLEAN_COLUMNS, JSON_COLUMNS
from fleetgate.store.sqlite_setup import BUSY_TIMEOUT, register_adapters, set_pragmas, sqlite_path
from fleetgate.store.store_url import is_postgres, psycopg_conninfo

T = TypeVar("T")

# Store work is a handful of concurrent operations at most (a log batch, a spend update,
# the poll, an admin call); more threads would only hold more connections.
WORKERS = 3
Params = Mapping[str, Any] | Sequence[Any]


def shown_url(url: str) -> str:
    """A store's URL without its password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))


def is_memory(url: str) -> bool:
    """An in-memory SQLite database: one connection holds it, so one thread serves it."""
    return url.startswith("sqlite") and (":memory:" in url or url.rstrip("/") == "sqlite:")


# a quoted string (left as it is), or a `:name` parameter (not a `::type` cast)
_PARAMETER = re.compile(r"'(?:[^']|'')*'|(?<![:\w]):([A-Za-z_]\w*)")


@functools.lru_cache(maxsize=256)
def _pyformat(sql: str) -> str:
    """`:name` as psycopg's `%(name)s`, and a literal `%` doubled (psycopg reads them in
    quoted strings too)."""
    return _PARAMETER.sub(
        lambda m: m.group(0) if m.group(1) is None else f"%({m.group(1)})s",
        sql.replace("%", "%%"),
    )


def json_text(value: Any) -> str | None:
    """A JSON column's value as a statement binds it (NULL for None). An integer beyond 64
    bits, which a config body may hold, goes through the standard library's encoder."""
    if value is None:
        return None
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return json.dumps(value, separators=(",", ":"))


class Conn:
    """One connection of a DB thread, as a store function uses it."""

    __slots__ = ("postgres", "raw")

    def __init__(self, raw: Any, postgres: bool) -> None:
        self.raw = raw
        self.postgres = postgres

    @property
    def dialect(self) -> str:
        return "postgresql" if self.postgres else "sqlite"

    def execute(self, sql: str, params: Params = ()) -> Any:
        """The driver's cursor of `sql` run with `params`."""
        if self.postgres:  # (a statement without parameters goes as it is written)
            return self.raw.execute(_pyformat(sql), params) if params else self.raw.execute(sql)
        return self.raw.execute(sql, params)

    def rows(self, sql: str, params: Params = ()) -> list[dict[str, Any]]:
        """Every row as a dict of its columns: JSON columns parsed, Boolean ones as bools
        (SQLite hands both back as it stores them: text, 0 and 1)."""
        cursor = self.execute(sql, params)
        names = [d[0] for d in cursor.description]
        is_json = [n in JSON_COLUMNS for n in names]
        boolean = [n in BOOLEAN_COLUMNS for n in names]
        out = []
        for row in cursor.fetchall():
            values = list(row)
            for i, value in enumerate(values):
                if value is None:
                    continue
                if is_json[i] and isinstance(value, str):
                    values[i] = json.loads(value)  # (exact beyond 64 bits, as psycopg's)
                elif boolean[i] and not isinstance(value, bool):
                    values[i] = bool(value)
            out.append(dict(zip(names, values, strict=True)))
        return out

    def tuples(self, sql: str, params: Params = ()) -> list[tuple[Any, ...]]:
        """Every row as the driver gives it."""
        return [tuple(r) for r in self.execute(sql, params).fetchall()]

    def value(self, sql: str, params: Params = ()) -> Any:
        """The first column of the first row; None when there is no row."""
        row = self.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def count(self, sql: str, params: Params = ()) -> int:
        """The rows a statement changed."""
        return int(self.execute(sql, params).rowcount)


class Database:
    def __init__(self, url: str, workers: int = WORKERS) -> None:
        self.url = url
        self.shown_url = shown_url(url)  # as logs and messages say it
        self.is_postgres = is_postgres(url)
        self.dialect = "postgresql" if self.is_postgres else "sqlite"
        memory = is_memory(url)
        if self.is_postgres:
            import psycopg

            self._driver: Any = psycopg
            self._conninfo = psycopg_conninfo(url)
        else:
            import sqlite3

            register_adapters()
            self._driver = sqlite3
            self._conninfo = ":memory:" if memory else sqlite_path(url)
        self._local = threading.local()
        self._opened: list[Any] = []
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(
            1 if memory else workers, thread_name_prefix="fleetgate-db"
        )

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` in a DB thread (for work that manages its own connection)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def transaction(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(conn, *args)` in one transaction, committed when it returns."""
        return await self.run(self._work, fn, args, True)

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(conn, *args)` on a connection whose transaction is rolled back after it."""
        return await self.run(self._work, fn, args, False)

    async def dispose(self) -> None:
        """Close the connections and the threads; the database is unusable after."""
        self._executor.shutdown(wait=True)
        with self._lock:
            opened, self._opened = self._opened, []
        for conn in opened:
            _close(conn)

    def _work(self, fn: Callable[..., T], args: tuple[Any, ...], commit: bool) -> T:
        with self.connection(commit) as conn:
            return fn(conn, *args)

    @contextlib.contextmanager
    def connection(self, commit: bool = True) -> Iterator[Conn]:
        """This DB thread's connection for one transaction: committed (or, `commit` false,
        rolled back) at the end, rolled back on an error; a driver's error comes out as
        the store's (`errors.py`). Only in a DB thread (`run`)."""
        driver = self._driver
        conn = self._connection()
        try:
            yield conn
            if commit:
                conn.raw.commit()
            else:
                conn.raw.rollback()
        except BaseException as exc:
            self._after_failure(conn)
            if not isinstance(exc, driver.Error):
                raise
            kind = (
                RowConflict
                if isinstance(exc, driver.IntegrityError)
                else RowRejected
                if isinstance(exc, driver.DataError)
                else StoreError
            )
            raise kind(str(exc).strip() or type(exc).__name__) from exc

    def _connection(self) -> Conn:
        conn: Conn | None = getattr(self._local, "conn", None)
        if conn is not None and self.is_postgres and not _alive(conn.raw):
            self._forget(conn)
            conn = None
        if conn is None:
            raw = self._open()
            with self._lock:
                self._opened.append(raw)
            conn = self._local.conn = Conn(raw, self.is_postgres)
        return conn

    def _open(self) -> Any:
        try:
            if self.is_postgres:
                return self._driver.connect(self._conninfo)
            raw = self._driver.connect(
                self._conninfo, timeout=BUSY_TIMEOUT, check_same_thread=False
            )
            set_pragmas(raw)
            return raw
        except self._driver.Error as exc:
            raise StoreError(str(exc).strip() or type(exc).__name__) from exc

    def _after_failure(self, conn: Conn) -> None:
        """Roll back; a connection that cannot be used again is closed (the thread's next
        operation opens a new one)."""
        try:
            conn.raw.rollback()
        except Exception:
            self._forget(conn)
            return
        if self.is_postgres and (conn.raw.closed or conn.raw.broken):
            self._forget(conn)

    def _forget(self, conn: Conn) -> None:
        self._local.conn = None
        with self._lock:
            if conn.raw in self._opened:
                self._opened.remove(conn.raw)
        _close(conn.raw)


def _alive(raw: Any) -> bool:
    """A pooled PostgreSQL connection still answers (the server may have restarted since
    its last use): one round trip, in the transaction the operation goes on with."""
    if raw.closed or raw.broken:
        return False
    try:
        raw.execute("SELECT 1")
        return True
    except Exception:
        return False


def _close(raw: Any) -> None:
    try:
        raw.close()
    except Exception:  # a broken one may fail to close: it is gone
        return
