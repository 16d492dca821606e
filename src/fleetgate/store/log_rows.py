"""The request log's rows as the database driver writes them, and the batches they go in.

Nothing here imports SQLAlchemy: the request log's writer process (`log_writer.py`) needs a
database driver only (sqlite3, or psycopg), so it starts in a quarter of the memory. The
serving process's `RequestLog` (`request_log.py`) writes the same rows, with the same
statements, through its SQLAlchemy engine.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from fleetgate.execute.outcome import Attempt
from fleetgate.outage import Outage
from fleetgate.record.recorder import BatchSink, RequestRecord

log = logging.getLogger("fleetgate.record")

# the columns of `tables.requests` that `request_log.row_of` fills, in its order (`seq` is
# the database's); a test keeps them equal to the table's
COLUMNS = (
    "request_id",
    "time",
    "client_key_id",
    "endpoint",
    "requested_model",
    "resolution",
    "virtual_model",
    "tier",
    "context_tier",
    "deployment_id",
    "provider_id",
    "upstream_model",
    "stream",
    "status",
    "error_code",
    "error_class",
    "latency",
    "ttft",
    "overhead",
    "prompt_tokens",
    "completion_tokens",
    "tokens_estimated",
    "context_estimate",
    "context_exact",
    "fallback_count",
    "dropped",
    "attempts",
    "trace_id",
    "notes",
)
# the Boolean ones, by position
BOOLEAN = frozenset(COLUMNS.index(name) for name in ("stream", "tokens_estimated", "context_exact"))
# a row in `COLUMNS` order: a tuple from `row_of`, a list as it comes through the writer
# process's pipe (binding takes either)
Row = Sequence[Any]


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
        "pool_wait": a.pool_wait,
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
        "continuation": a.continuation,
        "inherited_tokens": a.inherited_tokens,
    }


def row_of(r: RequestRecord) -> tuple[Any, ...]:
    """The request's row, in `COLUMNS` order, JSON columns encoded (drivers take text)."""
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


COPY_SQL = f"COPY requests ({', '.join(COLUMNS)}) FROM STDIN"  # PostgreSQL's bulk path


def placeholder(paramstyle: str) -> str:
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
    """The INSERT of the columns at positions `kept` of `COLUMNS`."""
    names = ", ".join(COLUMNS[i] for i in kept)
    return f"INSERT INTO requests ({names}) VALUES ({', '.join(mark for _ in kept)})"


def bound(rows: list[Row], mark: str) -> tuple[str, list[tuple[Any, ...]]]:
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
        if i in BOOLEAN and set(map(type, columns[i])) == {bool}
        else columns[i]
        for i in kept
    ]
    return _insert_sql(mark, kept), list(zip(*values, strict=True))


def chunks(rows: list[Row], chunk: int) -> Iterator[list[Row]]:
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


def copy_rows(cursor: Any, rows: list[Row], chunk: int) -> None:
    """The rows through a psycopg cursor's COPY, in its connection's transaction."""
    with cursor.copy(COPY_SQL) as copy:
        for piece in chunks(rows, chunk):
            for row in piece:
                copy.write_row(row)


class RowBatches(BatchSink):
    """Rows queued, then written in one transaction per flush (`_write`, by the
    subclass). When the database is unreachable (`UNREACHABLE`), rows wait (up to
    `capacity`, the oldest dropped and counted) and go with the next batch. A row the
    database rejects (a value it cannot hold: `REJECTED`) is set apart, counted and
    dropped: it never holds back the rows after it."""

    REJECTED: tuple[type[BaseException], ...] = ()
    UNREACHABLE: tuple[type[BaseException], ...] = (OSError,)

    def __init__(self, capacity: int, outage: Outage | None, yield_every: int) -> None:
        """`yield_every`: within a transaction, give the CPU to any runnable process after
        each so many rows (the log writer process, which shares a core with the server;
        it may change it between flushes)."""
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
        self.yield_every = yield_every

    async def _write(self, rows: list[Row]) -> None:
        """Write `rows` in one transaction (committed, or nothing written)."""
        raise NotImplementedError

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def waiting(self) -> bool:
        """Rows kept for the next batch (the store was unreachable)."""
        return bool(self._pending)

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
            await self._write(batch)
            done = len(batch)
            self.written += done
            self.outage.ok()
        except self.REJECTED:
            done = await self._isolate(batch)
        except self.UNREACHABLE as exc:
            self._keep(exc)
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
                await self._write(batch[lo:hi])
                self.written += hi - lo
            except self.REJECTED as exc:
                if hi - lo > 1:
                    mid = (lo + hi) // 2
                    todo += [(mid, hi), (lo, mid)]
                    continue
                self.rejected += 1
                log.warning(
                    "request log: the database refused request %.128r (%s); row dropped",
                    batch[lo][0],
                    type(getattr(exc, "orig", None) or exc).__name__,
                )
            except self.UNREACHABLE as exc:
                self._keep(exc)
                return done
            done = hi
        return done

    def _keep(self, exc: BaseException) -> None:
        self.failures += 1
        self.outage.failed(exc, "request-log rows and spend wait in memory")
