"""The one bridge from async code to the store: a sync SQLAlchemy Core engine whose work
runs in a few threads of its own.

Each store operation is one plain function of a `Connection`, run whole in a DB thread
(`transaction` inside `engine.begin()`, `read` inside `engine.connect()`): one hop from
the event loop per operation, and no `sqlalchemy.ext.asyncio` (which always imports the
ORM, ~8 MB resident) in the serving process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from sqlalchemy import Engine

T = TypeVar("T")

# Store work is a handful of concurrent operations at most (a log batch, a spend update,
# the poll, an admin call); more threads would only hold more connections.
WORKERS = 3


class Database:
    def __init__(self, engine: Engine, workers: int = WORKERS) -> None:
        self.engine = engine
        self.url = engine.url
        self.dialect = engine.dialect
        self.is_postgres = engine.dialect.name == "postgresql"
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="fleetgate-db")

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` in a DB thread (for work that manages its own connection)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def transaction(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(conn, *args)` in one transaction, committed when it returns."""
        return await self.run(self._begin, fn, args)

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(conn, *args)` on a connection whose transaction is rolled back after it."""
        return await self.run(self._connect, fn, args)

    async def dispose(self) -> None:
        """Close the pooled connections and the threads; the database is unusable after."""
        await self.run(self.engine.dispose)
        self._executor.shutdown(wait=True)

    def _begin(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        with self.engine.begin() as conn:
            return fn(conn, *args)

    def _connect(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        with self.engine.connect() as conn:
            return fn(conn, *args)
