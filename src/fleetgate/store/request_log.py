"""The request log in the store: one row per request, attempts inline, written in batches.

`RequestLog` is a `RecordSink` for the `Recorder`, which hands it records off the hot
path (each row made as its request ends, the rows written in batches). Rows hold numbers
and ids, never prompt or completion text, never secrets.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import logging
import os
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import Boolean, Connection, Select, and_, delete, or_, select
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, SQLAlchemyError

from fleetgate.execute.outcome import Attempt
from fleetgate.outage import Outage
from fleetgate.record.recorder import BatchSink, RequestRecord
from fleetgate.store.db import Database
from fleetgate.store.tables import requests

log = logging.getLogger("fleetgate.record")

# what the database says of a row it cannot hold (a value too long, a NUL in a string, a
# missing value), as opposed to being unreachable: the row is at fault, not the database
_ROW_REJECTED = (DataError, IntegrityError)


def _attempt(a: Attempt) -> dict[str, Any]:
    """One attempt as stored: everything but the upstream's message and body."""
    return {
        "idx": a.index,
        "deployment_id": a.deployment_id,
        "provider_id": a.provider_id,
        "upstream_model": a.upstream_model,
        "scope": a.scope,
        "status": a.status,
        "error_class": a.error_class,
        "latency": a.latency,
        "ttft": a.ttft,
        "retry_after": a.retry_after,
        "prompt_tokens": a.prompt_tokens,
        "completion_tokens": a.completion_tokens,
        "params": a.params,
        "key_label": a.key_label,
        "virtual_model": a.virtual_model,
        "tier": a.tier,
        "quantization": a.quantization,
        "dropped_params": a.dropped_params,
        "preferences": a.preferences,
        "wire": a.wire,
        "finish": a.finish,
        "failure": a.failure,
    }


# the columns `row_of` fills, in its order (`seq` is the database's)
_COLUMNS = tuple(c.name for c in requests.columns if c.name != "seq")
# a row in `_COLUMNS` order: a tuple from `row_of`, a list as it comes through the writer
# process's pipe (binding takes either)
Row = Sequence[Any]


def row_of(r: RequestRecord) -> tuple[Any, ...]:
    """The request's row, in `_COLUMNS` order, JSON columns encoded (drivers take text)."""
    last = r.attempts[-1] if r.attempts else None
    final = last if last is not None and r.deployment_id == last.deployment_id else None
    notes = r.notes
    resolution = notes.get("resolution")
    if not isinstance(resolution, dict):
        resolution = {}
    context_estimate = notes.get("context_estimate")
    prompt = final.prompt_tokens if final else None
    estimated = False
    if prompt is None and isinstance(context_estimate, int):
        prompt, estimated = context_estimate, True
    return (
        r.request_id,
        r.time,
        r.client_key_id,
        r.endpoint,
        r.requested_model,
        r.resolution,
        r.virtual_model,
        resolution.get("tier"),
        notes.get("context_tier"),
        r.deployment_id,
        r.provider_id,
        final.upstream_model if final else None,
        r.stream,
        r.status,
        r.error_code,
        last.error_class if last else None,
        r.latency,
        final.ttft if final else None,
        r.overhead,
        prompt,
        final.completion_tokens if final else None,
        estimated,
        context_estimate,
        notes.get("context_exact"),
        max(len(r.attempts) - 1, 0),
        orjson.dumps(r.dropped).decode() if r.dropped else None,
        orjson.dumps([_attempt(a) for a in r.attempts]).decode(),
        r.trace_id,
        orjson.dumps(notes, default=str).decode() if notes else None,
    )


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


class RequestLog(BatchSink):
    """A `RecordSink`. When the database is unreachable, rows wait (up to `capacity`
    requests, the oldest dropped and counted) and go with the next batch. A row the
    database rejects (a value it cannot hold) is set apart, counted and dropped: it never
    holds back the rows after it."""

    def __init__(
        self,
        db: Database,
        capacity: int = 10_000,
        outage: Outage | None = None,
        yield_every: int = 0,
    ) -> None:
        """`yield_every`: within a transaction, give the CPU to any runnable process after
        each so many rows (the log writer process, which shares a core with the server;
        it may change it between flushes)."""
        self.db = db
        self.capacity = capacity
        self.outage = outage or Outage("the store", log)
        self.written = 0
        self.dropped = 0  # rows lost because the database stayed unreachable
        self.failures = 0  # batches that could not be written (and were kept)
        self.rejected = 0  # rows the database refused to hold (dropped)
        self._pending: deque[Row] = deque()
        # one flush at a time: a second one begun while the first waits on the database
        # would write the same rows again, then take them off `_pending` a second time
        self._flushing = asyncio.Lock()
        # PostgreSQL: COPY (a third of executemany's client CPU per row); SQLite: executemany
        # (for executemany: its placeholder; each batch's INSERT names the columns it fills)
        self._insert = _copy_sql() if db.is_postgres else _placeholder(db.dialect.paramstyle)
        self._insert_rows = _copy_rows if db.is_postgres else _insert_rows
        self.yield_every = yield_every

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def waiting(self) -> bool:
        """Rows kept for the next batch (the store was unreachable)."""
        return bool(self._pending)

    def take(self, record: RequestRecord) -> None:
        self.queue([row_of(record)])

    def queue(self, rows: list[Row]) -> None:
        """Rows (`Row`s: as `row_of` makes them, or lists from the writer's pipe) to go with
        the next `flush`."""
        pending = self._pending
        for row in rows:
            if len(pending) >= self.capacity:
                pending.popleft()
                self.dropped += 1
            pending.append(row)

    async def flush(self) -> None:
        """Write every pending row in one transaction (kept pending when that fails)."""
        if not self._pending:
            return
        async with self._flushing:
            await self._flush()

    async def _flush(self) -> None:
        pending = self._pending
        if not pending:
            return
        batch = list(pending)
        try:
            # one hop to a DB thread: BEGIN, executemany, COMMIT
            await self.db.transaction(self._insert_rows, self._insert, batch, self.yield_every)
            done = len(batch)
            self.written += done
            self.outage.ok()
        except _ROW_REJECTED:
            done = await self._isolate(batch)
        except (SQLAlchemyError, OSError) as exc:
            self._keep(batch, exc)
            return
        for _ in range(done):
            pending.popleft()

    async def _isolate(self, batch: list[Row]) -> int:
        """Write a batch the database refused, halving it until each refused row stands
        alone (that one is dropped and counted). Returns how many leading rows of the
        batch are settled; the rest stay pending when the database goes away meanwhile."""
        done = 0
        todo = [(len(batch) // 2, len(batch)), (0, len(batch) // 2)]  # popped left first
        while todo:
            lo, hi = todo.pop()
            if lo == hi:
                continue
            try:
                await self.db.transaction(
                    self._insert_rows, self._insert, batch[lo:hi], self.yield_every
                )
                self.written += hi - lo
            except _ROW_REJECTED as exc:
                if hi - lo > 1:
                    mid = (lo + hi) // 2
                    todo += [(mid, hi), (lo, mid)]
                    continue
                self.rejected += 1
                log.warning(
                    "request log: the database refused request %.128r (%s); row dropped",
                    batch[lo][0],
                    type(exc.orig).__name__,
                )
            except (SQLAlchemyError, OSError) as exc:
                self._keep(batch[lo:], exc)
                return done
            done = hi
        return done

    def _keep(self, rows: list[Row], exc: BaseException) -> None:
        self.failures += 1
        self.outage.failed(exc, "request-log rows and spend wait in memory")

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
        query = select(*_LISTED)
        if fallback is not None:
            count = requests.c.fallback_count
            query = query.where(count > 0 if fallback else count == 0)
        if model is not None:
            query = query.where(requests.c.requested_model == model)
        if key is not None:
            query = query.where(requests.c.client_key_id == key)
        if deployment is not None:
            query = query.where(requests.c.deployment_id == deployment)
        if status is not None:
            if status == "ok":
                query = query.where(requests.c.status < 400)
            elif status == "error":
                query = query.where(requests.c.status >= 400)
            else:
                query = query.where(requests.c.status == int(status))
        if since is not None:
            query = query.where(requests.c.time >= since)
        if cursor is not None:
            when, seq = decode_cursor(cursor)
            query = query.where(
                or_(requests.c.time < when, and_(requests.c.time == when, requests.c.seq < seq))
            )
        query = query.order_by(requests.c.time.desc(), requests.c.seq.desc()).limit(limit + 1)
        rows = await self.db.read(_rows, query)
        more = len(rows) > limit
        rows = rows[:limit]
        next_cursor = encode_cursor(rows[-1]["time"], rows[-1]["seq"]) if more else None
        return Page([_public(r) for r in rows], next_cursor)

    async def get(self, request_id: str) -> dict[str, Any] | None:
        """The newest request with this id, with its attempts in order."""
        query = (
            select(requests)
            .where(requests.c.request_id == request_id)
            .order_by(requests.c.time.desc(), requests.c.seq.desc())
            .limit(1)
        )
        rows = await self.db.read(_rows, query)
        return _public(rows[0]) if rows else None


def _placeholder(paramstyle: str) -> str:
    # Plain driver-level executemany: the log is the one bulk writer, and skipping
    # SQLAlchemy's per-row parameter processing halves its CPU cost per row. The
    # placeholders are the driver's own: sqlite3's `?`, psycopg's `%s`.
    if paramstyle == "qmark":
        return "?"
    if paramstyle in ("format", "pyformat"):
        return "%s"
    raise ValueError(f"the request log has no INSERT for paramstyle {paramstyle!r}")


@functools.lru_cache(maxsize=64)
def _insert_sql(mark: str, kept: tuple[int, ...]) -> str:
    """The INSERT of the columns at positions `kept` of `_COLUMNS`."""
    names = ", ".join(_COLUMNS[i] for i in kept)
    return f"INSERT INTO requests ({names}) VALUES ({', '.join(mark for _ in kept)})"


_BOOLEAN = frozenset(
    i for i, name in enumerate(_COLUMNS) if isinstance(requests.c[name].type, Boolean)
)


def _bound(rows: list[Row], mark: str) -> tuple[str, list[tuple[Any, ...]]]:
    """The INSERT for `rows` and what it binds: only the columns some row fills (a column
    NULL in every row is left to its default, NULL: the same rows), Boolean columns as
    0 and 1 (what SQLite stores for them).

    sqlite3 binds a value of a type other than int, float, str and bytes only through its
    adapter registry (a key tuple built, a dict lookup, a call): about 1,400 instructions a
    value, where an int costs 170. A row of a plain answered request holds nine NULLs and
    two Booleans: the writer executed a sixth less per row without them (0.070 → 0.058 M
    instructions a request in `benchmarks.instructions`)."""
    columns = list(zip(*rows, strict=True))
    n = len(rows)
    kept = tuple(i for i, col in enumerate(columns) if col[0] is not None or col.count(None) != n)
    values = [
        tuple(map(int, columns[i]))
        if i in _BOOLEAN and set(map(type, columns[i])) == {bool}
        else columns[i]
        for i in kept
    ]
    return _insert_sql(mark, kept), list(zip(*values, strict=True))


def _chunks(rows: list[Row], chunk: int) -> Iterator[list[Row]]:
    """`rows` in pieces of `chunk` (all at once for 0), the CPU offered to any other
    runnable process between two pieces: a server sharing the core with the log writer
    waits for one piece at most, never for a whole transaction."""
    if chunk <= 0 or len(rows) <= chunk:
        yield rows
        return
    for start in range(0, len(rows), chunk):
        if start:
            os.sched_yield()
        yield rows[start : start + chunk]


def _insert_rows(conn: Connection, mark: str, rows: list[Row], chunk: int) -> None:
    for piece in _chunks(rows, chunk):
        if piece:  # (no INSERT names no column)
            conn.exec_driver_sql(*_bound(piece, mark))


def _copy_sql() -> str:
    return f"COPY requests ({', '.join(_COLUMNS)}) FROM STDIN"


def _copy_rows(conn: Connection, sql: str, rows: list[Row], chunk: int) -> None:
    """The rows through psycopg's COPY, in the transaction of `conn`; a driver error comes
    out as SQLAlchemy's class for it (DataError for a value too long, …), as from
    `_insert_rows`."""
    import psycopg

    dbapi = conn.connection.dbapi_connection
    assert dbapi is not None
    try:
        with dbapi.cursor() as cursor, cursor.copy(sql) as copy:
            for piece in _chunks(rows, chunk):
                for row in piece:
                    copy.write_row(row)
    except psycopg.Error as exc:
        raise DBAPIError.instance(sql, None, exc, psycopg.Error) from exc


def _purge_chunk(conn: Connection, older_than: float, chunk: int) -> int:
    oldest = select(requests.c.seq).where(requests.c.time < older_than).limit(chunk)
    return conn.execute(delete(requests).where(requests.c.seq.in_(oldest))).rowcount


def _rows(conn: Connection, query: Select[Any]) -> list[dict[str, Any]]:
    return [dict(r._mapping) for r in conn.execute(query)]


# what a listing shows: everything but the attempts and notes (one request's view has them)
_LISTED = tuple(c for c in requests.columns if c.name not in ("attempts", "notes"))


def _public(row: dict[str, Any]) -> dict[str, Any]:
    row.pop("seq", None)
    return row


def retention_cutoff(days: float, now: float | None = None) -> float:
    return (time.time() if now is None else now) - days * 86400
