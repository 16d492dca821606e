"""Tokenizer fingerprints, kept in the store by the engine's model identity.

One `store_meta` row holds every identity's probe counts (`discovery/fingerprint.py`), so
a restart or another replica finds an engine's tokenizer fingerprinted and asks it nothing.
A store outage costs a save, never a request: the next round of a replica that has none
counts the probes again.
"""

from __future__ import annotations

import asyncio
import logging
import time

from fleetgate.context.probes import VERSION
from fleetgate.discovery.fingerprint import FingerprintCache, Probes, encode
from fleetgate.store.calibration import CalibrationStore
from fleetgate.store.db import Database
from fleetgate.store.errors import StoreError, StoreUnavailable

log = logging.getLogger("fleetgate.store")

KEY = "tokenizer_fingerprints"


class FingerprintKeeper:
    def __init__(self, db: Database, cache: FingerprintCache) -> None:
        self.store = CalibrationStore(db, KEY)
        self.cache = cache
        self._saving: set[asyncio.Task[None]] = set()
        cache.on_new = self._on_new

    async def load(self) -> None:
        try:
            self.cache.load(await self.store.load())
        except (StoreUnavailable, StoreError, OSError) as exc:
            log.info("tokenizer fingerprints not loaded (%s)", type(exc).__name__)

    def _on_new(self, identity: str, probes: Probes) -> None:
        task = asyncio.get_running_loop().create_task(self._save(identity, probes))
        self._saving.add(task)
        task.add_done_callback(self._saving.discard)

    async def _save(self, identity: str, probes: Probes) -> None:
        try:
            stored = await self.store.load()  # another replica's may be there
            stored[identity] = {"probes": encode(probes), "version": VERSION, "at": time.time()}
            await self.store.save(stored)
        except (StoreUnavailable, StoreError, OSError) as exc:
            log.info("tokenizer fingerprint not saved (%s)", type(exc).__name__)

    async def stop(self) -> None:
        if self._saving:
            await asyncio.gather(*self._saving, return_exceptions=True)
