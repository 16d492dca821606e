"""The request log's rows written with the database driver alone: the writer process's.

The same statements as the serving process's `RequestLog` (`log_rows.py`), through one
connection of sqlite3 or psycopg opened in a thread of its own, and no SQLAlchemy: the
writer process holds about a quarter of the memory it would with it. A connection that
fails is closed, and the next batch opens a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fleetgate.store.log_rows import Row, RowBatches, bound, chunks, copy_rows, placeholder
from fleetgate.store.sqlite_setup import BUSY_TIMEOUT, register_adapters, set_pragmas, sqlite_path

_PSYCOPG = "postgresql+psycopg://"  # what `database.database_url` gives for PostgreSQL


class DriverLog(RowBatches):
    """`RowBatches` written through the driver of the store at `url` (as
    `database.database_url` returns it)."""

    def __init__(self, url: str, capacity: int, yield_every: int = 0) -> None:
        super().__init__(capacity, None, yield_every)
        self.postgres = url.startswith(_PSYCOPG)
        if self.postgres:
            import psycopg

            self.REJECTED = (psycopg.DataError, psycopg.IntegrityError)
            self.UNREACHABLE = (psycopg.Error, OSError)
            self._conninfo = "postgresql://" + url.removeprefix(_PSYCOPG)
        else:
            self.REJECTED = (sqlite3.DataError, sqlite3.IntegrityError)
            self.UNREACHABLE = (sqlite3.Error, OSError)
            self._conninfo = sqlite_path(url)
            register_adapters()
        self._conn: Any = None  # opened by the first batch, in the thread
        # one thread: a sqlite3 connection serves only the thread that opened it
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="fleetgate-log")

    async def _write(self, rows: list[Row]) -> None:
        await asyncio.get_running_loop().run_in_executor(self._thread, self._transaction, rows)

    def _transaction(self, rows: list[Row]) -> None:
        conn = self._conn
        if conn is None:
            conn = self._conn = self._open()
        try:
            if self.postgres:
                with conn.cursor() as cursor:
                    copy_rows(cursor, rows, self.yield_every)
            else:
                mark = placeholder(sqlite3.paramstyle)
                for piece in chunks(rows, self.yield_every):
                    if piece:  # (no INSERT names no column)
                        conn.executemany(*bound(piece, mark))
            conn.commit()
        except self.REJECTED:
            conn.rollback()
            raise
        except BaseException:
            self._close()  # the next batch opens a new connection
            raise

    def _open(self) -> Any:
        if self.postgres:
            import psycopg

            return psycopg.connect(self._conninfo)
        conn = sqlite3.connect(self._conninfo, timeout=BUSY_TIMEOUT)
        set_pragmas(conn)
        return conn

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # a broken one may fail to close: it is gone
                conn.close()

    async def close(self) -> None:
        """Close the connection and the thread."""
        await asyncio.get_running_loop().run_in_executor(self._thread, self._close)
        self._thread.shutdown(wait=True)
