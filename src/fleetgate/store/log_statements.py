"""The request log's statements as a database driver runs them: the columns, the INSERT
of a batch (only the columns some row fills) and PostgreSQL's COPY.

Nothing here imports SQLAlchemy, asyncio or the records: the request log's writer process
(`writer_child.py`) needs a database driver only (sqlite3, or psycopg). The serving
process's `RequestLog` (`request_log.py`) runs the same statements through its own
connections (`db.py`).
"""

from __future__ import annotations

import functools
import os

# `typing` is for the type checker alone: the writer process holds none (`outage.py`)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from typing import Any, TypeAlias

    # a row in `COLUMNS` order: a tuple from `row_of`, a list as it comes through the
    # writer process's pipe (binding takes either)
    Row: TypeAlias = Sequence[Any]

# the columns of `tables.requests` that `log_rows.row_of` fills, in its order (`seq` is
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

COPY_SQL = f"COPY requests ({', '.join(COLUMNS)}) FROM STDIN"  # PostgreSQL's bulk path


def placeholder(paramstyle: str) -> str:
    # Plain driver-level executemany: the log is the one bulk writer, and skipping
    # a statement layer's per-row parameter processing halves its CPU cost per row. The
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
