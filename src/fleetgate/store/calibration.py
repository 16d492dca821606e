"""The context estimate's calibration, kept in the store across restarts.

One `store_meta` row holds every deployment's decayed histogram (`CalibrationBook.dumps`).
A replica loads it at start and saves its book while it changes; with several replicas the
books are shared through Redis (`state/redis_state.py`), so whichever saves last saves the
cluster's.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson

from fleetgate.context.calibration import CalibrationBook
from fleetgate.store.db import Conn, Database
from fleetgate.store.errors import RowConflict, StoreError, StoreUnavailable
from fleetgate.store.meta import get_meta, put_meta

log = logging.getLogger("fleetgate.store")

KEY = "context_calibration"
SAVE_INTERVAL = 30.0  # seconds between saves of a changed book


class CalibrationStore:
    """One `store_meta` row of JSON: deployment -> its calibration's dump (by default)."""

    def __init__(self, db: Database, key: str = KEY) -> None:
        self.db = db
        self.key = key

    async def load(self) -> dict[str, dict[str, Any]]:
        """The row's JSON object; empty before the first save."""
        return await self.db.read(_load, self.key)

    async def save(self, dumps: dict[str, dict[str, Any]]) -> None:
        value = orjson.dumps(dumps).decode()
        try:
            await self.db.transaction(put_meta, self.key, value)
        except RowConflict:  # another replica inserted the row first
            await self.db.transaction(put_meta, self.key, value)


def _load(conn: Conn, key: str) -> dict[str, dict[str, Any]]:
    value = get_meta(conn, key)
    data = orjson.loads(value) if value is not None else {}
    return data if isinstance(data, dict) else {}


class CalibrationKeeper:
    """Loads a replica's book from the store at start, saves it while it changes (every
    `SAVE_INTERVAL`) and once more at stop. A store outage costs a save, never a request."""

    def __init__(self, store: CalibrationStore, book: CalibrationBook) -> None:
        self.store = store
        self.book = book
        self._saved = 0  # the book's version at the last save

    async def load(self) -> None:
        for dep_id, data in (await self.store.load()).items():
            self.book.put(dep_id, data)
        self._saved = self.book.version

    async def save(self) -> None:
        version = self.book.version
        if version == self._saved:
            return
        try:
            await self.store.save(self.book.dumps())
        except (StoreUnavailable, StoreError, OSError) as exc:
            log.info(
                "calibration not saved (%s); next try in %.0f s", type(exc).__name__, SAVE_INTERVAL
            )
            return
        self._saved = version

    async def run(self) -> None:
        while True:
            await asyncio.sleep(SAVE_INTERVAL)
            await self.save()
