"""The request log in the store: one row per request, attempts inline, written in batches.

`RequestLog` is a `RecordSink` for the `Recorder`, which hands it records off the hot
path (each row made as its request ends, the rows written in batches). Rows hold numbers
and ids, never prompt or completion text, never secrets.
"""

from __future__ import annotations

import base64
import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from fleetgate.outage import Outage
from fleetgate.record.recorder import RequestRecord
from fleetgate.store.db import Conn, Database
from fleetgate.store.errors import RowConflict, RowRejected, StoreError
from fleetgate.store.log_rows import RowBatches, row_of
from fleetgate.store.log_statements import COLUMNS, COPY_SQL, bound, chunks, copy_rows, placeholder
from fleetgate.store.sqlite_setup import SQLITE_PARAMSTYLE

if TYPE_CHECKING:
    from fleetgate.store.log_statements import Row

log = logging.getLogger("fleetgate.record")

# what the database says of a row it cannot hold (a value too long, a NUL in a string, a
# missing value), as opposed to being unreachable: the row is at fault, not the database
_ROW_REJECTED = (RowRejected, RowConflict)


@dataclass(frozen=True, slots=True)
class Page:
    rows: list[dict[str, Any]]
    next_cursor: str | None


def encode_cursor(row_time: float, seq: int) -> str:
    return base64.urlsafe_b64encode(f"{row_time!r}|{seq}".encode()).decode()


def decode_cursor(cursor: str) -> tuple[float, int]:
    """Raises ValueError on a cursor this module did not make."""
    text = base64.urlsafe_b64decode(cursor.encode()).decode()
    when, _, seq = text.partition("|")
    return float(when), int(seq)


def parse_since(value: str) -> float:
    """Epoch seconds, or an ISO-8601 time (UTC when it names no zone)."""
    try:
        return float(value)
    except ValueError:
        pass
    when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if when.tzinfo is None:
        return when.replace(tzinfo=datetime.now().astimezone().tzinfo).timestamp()
    return when.timestamp()


class RequestLog(RowBatches):
    """A `RecordSink` writing through the store's connections (`RowBatches` says what
    happens to rows while the database is unreachable, and to a row it refuses)."""

    REJECTED = _ROW_REJECTED
    UNREACHABLE = (StoreError, OSError)

    def __init__(
        self,
        db: Database,
        capacity: int = 10_000,
        outage: Outage | None = None,
        yield_every: int = 0,
    ) -> None:
        super().__init__(capacity, outage, yield_every)
        self.db = db
        # PostgreSQL: COPY (a third of executemany's client CPU per row); SQLite: executemany
        # (for executemany: its placeholder; each batch's INSERT names the columns it fills)
        self._insert = COPY_SQL if db.is_postgres else placeholder(SQLITE_PARAMSTYLE)
        self._insert_rows = _copy_rows if db.is_postgres else _insert_rows

    def take(self, record: RequestRecord) -> None:
        self.queue([row_of(record)])

    async def _write(self, rows: list[Row]) -> None:
        # one hop to a DB thread: BEGIN, executemany (or COPY), COMMIT
        await self.db.transaction(self._insert_rows, self._insert, rows, self.yield_every)

    async def purge(self, older_than: float, chunk: int = 1000) -> int:
        """Delete rows older than `older_than` (epoch seconds), `chunk` requests per
        transaction so a big backlog never holds long locks. Returns how many went."""
        total = 0
        while True:
            gone = await self.db.transaction(_purge_chunk, older_than, chunk)
            total += gone
            if gone < chunk:
                return total

    async def page(
        self,
        *,
        model: str | None = None,
        key: str | None = None,
        deployment: str | None = None,
        status: str | None = None,
        fallback: bool | None = None,
        since: float | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        """Newest first; `cursor` continues after the last row of the previous page.
        `fallback`: only requests that fell back (true), or that did not (false)."""
        where: list[str] = []
        params: dict[str, Any] = {"limit": limit + 1}
        if fallback is not None:
            where.append("fallback_count > 0" if fallback else "fallback_count = 0")
        for column, value in (
            ("requested_model", model),
            ("client_key_id", key),
            ("deployment_id", deployment),
        ):
            if value is not None:
                where.append(f"{column} = :{column}")
                params[column] = value
        if status is not None:
            if status == "ok":
                where.append("status < 400")
            elif status == "error":
                where.append("status >= 400")
            else:
                where.append("status = :status")
                params["status"] = int(status)
        if since is not None:
            where.append("time >= :since")
            params["since"] = since
        if cursor is not None:
            params["when"], params["seq"] = decode_cursor(cursor)
            where.append("(time < :when OR (time = :when AND seq < :seq))")
        sql = f"SELECT {_LISTED} FROM requests"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY time DESC, seq DESC LIMIT :limit"
        rows = await self.db.read(Conn.rows, sql, params)
        more = len(rows) > limit
        rows = rows[:limit]
        next_cursor = encode_cursor(rows[-1]["time"], rows[-1]["seq"]) if more else None
        return Page([_public(r) for r in rows], next_cursor)

    async def get(self, request_id: str) -> dict[str, Any] | None:
        """The newest request with this id, with its attempts in order."""
        sql = (
            f"SELECT seq, {', '.join(COLUMNS)} FROM requests WHERE request_id = :id "
            "ORDER BY time DESC, seq DESC LIMIT 1"
        )
        rows = await self.db.read(Conn.rows, sql, {"id": request_id})
        return _public(rows[0]) if rows else None


def _insert_rows(conn: Conn, mark: str, rows: list[Row], chunk: int) -> None:
    for piece in chunks(rows, chunk):
        if piece:  # (no INSERT names no column)
            conn.raw.executemany(*bound(piece, mark))


def _copy_rows(conn: Conn, _sql: str, rows: list[Row], chunk: int) -> None:
    """The rows through psycopg's COPY, in the transaction of `conn`."""
    with conn.raw.cursor() as cursor:
        copy_rows(cursor, rows, chunk)


def _purge_chunk(conn: Conn, older_than: float, chunk: int) -> int:
    return conn.count(
        "DELETE FROM requests WHERE seq IN "
        "(SELECT seq FROM requests WHERE time < :older LIMIT :chunk)",
        {"older": older_than, "chunk": chunk},
    )


# what a listing shows: everything but the attempts and notes (one request's view has them)
_LISTED = ", ".join(("seq", *(c for c in COLUMNS if c not in ("attempts", "notes"))))


def _public(row: dict[str, Any]) -> dict[str, Any]:
    row.pop("seq", None)
    return row


def retention_cutoff(days: float, now: float | None = None) -> float:
    return (time.time() if now is None else now) - days * 86400
