"""The store's errors (kept free of any database driver, so the CLI and the ASGI app can
catch them without importing the database layer).

`Database` (`db.py`) turns each error of the driver (sqlite3's, or psycopg's) into one of
these, so no caller names a driver: `StoreError` for any failure of the database,
`RowConflict` when a row breaks a key or constraint (another replica wrote it first),
`RowRejected` when the database cannot hold a value (too long, a NUL in a string)."""

from __future__ import annotations


class StoreUnavailable(Exception):
    """The store cannot be used: an unsupported URL, or a database that cannot be opened.
    The message names the (password-free) URL and what to check."""


class StoreError(Exception):
    """The database failed a statement, or could not be reached; the message is the
    driver's, the driver's own error is the cause."""


class RowConflict(StoreError):
    """A row broke a unique key or a constraint."""


class RowRejected(StoreError):
    """The database cannot hold a value of the row."""
