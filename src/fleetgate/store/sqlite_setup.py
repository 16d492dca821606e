"""How every SQLite connection of the store is set up, whoever opens it: the serving
process's connections (`db.py`), the engine that upgrades an older store
(`database.py`), or the request log's writer process (`driver_log.py`)."""

from __future__ import annotations

# the driver's own module, as `driver_log.py` imports it (the request log's writer process
# holds no `datetime`)
import _sqlite3

TYPE_CHECKING = False
if TYPE_CHECKING:
    import sqlite3

SQLITE_PARAMSTYLE = "qmark"  # `sqlite3.paramstyle`, which the driver's own module does not name
SQLITE_CACHE_KIB = 256  # SQLite page cache per connection
# The request log's writer only appends: its rows' pages and the right edge of the table's
# and indexes' trees. A quarter of the cache held the writer process about 0.12 MB lower
# at its peak, for the same instructions per row (44.1 k against 44.4 k, callgrind, 10,000
# rows in transactions of 500 and of 250).
WRITER_CACHE_KIB = 64
BUSY_TIMEOUT = 30.0  # sqlite3's busy timeout: a writer waits this long for another one's lock


def _null(_: None) -> None:
    return None


def register_adapters() -> None:
    """sqlite3 binds a value of another type than int, float, str and bytearray (a bool,
    None) only after two failed attribute lookups (the adapter protocol's `__adapt__`,
    `__conform__`), each formatting an AttributeError: two fifths of the log writer's
    instructions per row (a row has three bools and about ten NULLs). A registered
    adapter is found first, and binds the same. (The request log's batches leave most of
    those values unbound: `log_statements.bound`; these adapters bind what remains, and every
    other table's.)"""
    _sqlite3.register_adapter(bool, int)
    _sqlite3.register_adapter(type(None), _null)


def set_pragmas(conn: sqlite3.Connection, cache_kib: int = SQLITE_CACHE_KIB) -> None:
    """A new connection's settings; `cache_kib`: its page cache."""
    cursor = conn.cursor()
    # WAL lets the request log write while the admin API reads; foreign keys are enforced
    # wherever a schema declares them (revision 0001's attempts table).
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    # WAL with synchronous=NORMAL: durable across crashes of the process, one fsync per
    # checkpoint instead of per commit of a log batch
    cursor.execute("PRAGMA synchronous=NORMAL")
    # The page cache is per connection and 2 MB by default, most of the memory the store
    # adds under load. The request log appends; its reads go through indexes; the OS
    # caches the file anyway. 256 KiB measured ~3 MB less peak RSS.
    cursor.execute(f"PRAGMA cache_size=-{cache_kib}")
    cursor.close()


def sqlite_path(url: str) -> str:
    """The file of a `sqlite:///PATH` URL (four slashes: an absolute path), as SQLAlchemy's URLs
    reads it."""
    rest = url.split("://", 1)[1]
    if not rest.startswith("/") or rest == "/":
        raise ValueError(f"not a SQLite file URL: {url.split('://', 1)[0]}://…")
    return rest[1:].split("?", 1)[0]
