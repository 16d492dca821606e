"""The request log's rows written with the database driver alone: the writer process's.

The same statements as the serving process's `RequestLog` (`log_statements.py`), through
one connection of sqlite3 or psycopg, and no SQLAlchemy, nor an event loop: the writer
process calls it, and holds about a quarter of the memory it would with SQLAlchemy. (When
the serving process writes with it, in place of a writer that died, it calls it from one
thread of its own: a sqlite3 connection serves only the thread that opened it.) A
connection that fails is closed, and the next batch opens a new one.
"""

from __future__ import annotations

# the driver's own module: the `sqlite3` package around it adds the adapters of dates and
# times, which the log's rows never hold, and the `datetime` they import (about 0.5 MB of
# the writer process); connections, errors and adapters are the same objects
import _sqlite3 as sqlite3

from fleetgate.store.log_statements import bound, chunks, copy_rows, placeholder
from fleetgate.store.row_queue import RowQueue
from fleetgate.store.sqlite_setup import (
    BUSY_TIMEOUT,
    SQLITE_PARAMSTYLE,
    WRITER_CACHE_KIB,
    register_adapters,
    set_pragmas,
    sqlite_path,
)
from fleetgate.store.store_url import is_postgres, psycopg_conninfo

# `typing` is for the type checker alone: the writer process holds none (`outage.py`)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from fleetgate.outage import Log
    from fleetgate.store.log_statements import Row


class DriverLog(RowQueue):
    """A `RowQueue` written through the driver of the store at `url` (as
    `database.database_url` returns it)."""

    def __init__(self, url: str, capacity: int, log: Log, yield_every: int = 0) -> None:
        super().__init__(capacity, None, yield_every, log)
        self.postgres = is_postgres(url)
        if self.postgres:
            import psycopg

            self.REJECTED = (psycopg.DataError, psycopg.IntegrityError)
            self.UNREACHABLE = (psycopg.Error, OSError)
            self._conninfo = psycopg_conninfo(url)
        else:
            self.REJECTED = (sqlite3.DataError, sqlite3.IntegrityError)
            self.UNREACHABLE = (sqlite3.Error, OSError)
            self._conninfo = sqlite_path(url)
            register_adapters()
        self._conn: Any = None  # opened by the first batch

    def flush(self) -> None:
        """Write every pending row in one transaction (kept pending when that fails)."""
        self.write_pending(self._transaction)

    def _transaction(self, rows: list[Row]) -> None:
        conn = self._conn
        if conn is None:
            conn = self._conn = self._open()
        try:
            if self.postgres:
                with conn.cursor() as cursor:
                    copy_rows(cursor, rows, self.yield_every)
            else:
                mark = placeholder(SQLITE_PARAMSTYLE)
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
        set_pragmas(conn, WRITER_CACHE_KIB)
        return conn

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:  # (no contextlib in the writer process: `outage.py`)
                conn.close()
            except Exception:  # a broken one may fail to close: it is gone
                return

    def close(self) -> None:
        """Close the connection."""
        self._close()
