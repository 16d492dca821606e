"""Which deployment last served each prompt prefix: the prompt-cache affinity table.

Entries are keyed by prefix keys (ingress/prefix.py), never by prompt text, and expire
`ttl` seconds after they were written, when the engine has likely evicted the prefix. The
table lives apart from the fleet, so a fleet swap keeps it; an entry naming a deployment
that is gone is simply never a candidate. `MemoryAffinity` is one replica's table;
`RedisAffinity` shares writes with the other replicas (pub/sub, batched off the hot path).
Reads are synchronous, like every routing read.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from fleetgate.config.schema import AffinityConfig

if TYPE_CHECKING:
    from fleetgate.state.redis_link import RedisLink

FLUSH_INTERVAL = 0.05  # seconds between two batches of shared writes


class MemoryAffinity:
    """At most `max_entries` prefixes, least recently written first out."""

    def __init__(self, config: AffinityConfig | None = None) -> None:
        config = config or AffinityConfig()
        self.ttl = config.ttl_seconds
        self.max_entries = config.max_entries
        self._entries: OrderedDict[int, tuple[str, float]] = OrderedDict()

    def configure(self, config: AffinityConfig) -> None:
        """Apply a reloaded config; entries keep their expiry."""
        self.ttl = config.ttl_seconds
        self.max_entries = config.max_entries
        self._trim()

    def owner(self, key: int, now: float) -> str | None:
        """The deployment that last served `key`, while the entry lives."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[1] <= now:
            del self._entries[key]
            return None
        return entry[0]

    def record(self, key: int, deployment_id: str, now: float) -> None:
        """`deployment_id` has just served a prompt whose whole prefix key is `key`."""
        self._store(key, deployment_id, now + self.ttl)

    def _store(self, key: int, deployment_id: str, expires: float) -> None:
        self._entries[key] = (deployment_id, expires)
        self._entries.move_to_end(key)
        self._trim()

    def _trim(self) -> None:
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


class RedisAffinity(MemoryAffinity):
    """A local table that publishes its writes to the other replicas and applies theirs.

    Writes are batched: one event per `FLUSH_INTERVAL` carries every entry written since the
    last one. A replica that starts later learns each conversation at its next turn (and
    misses agree across replicas anyway: they fall to the same consistent-hash choice).
    """

    def __init__(self, config: AffinityConfig | None = None) -> None:
        super().__init__(config)
        self.link: RedisLink | None = None
        self._pending: list[list[Any]] = []
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    def attach(self, link: RedisLink) -> None:
        self.link = link
        link.on("affinity", self._apply)
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._flush_loop())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def record(self, key: int, deployment_id: str, now: float) -> None:
        expires = now + self.ttl
        self._store(key, deployment_id, expires)
        if self.link is not None and self._wake is not None:
            self._pending.append([f"{key:x}", deployment_id, expires])
            self._wake.set()

    def _apply(self, event: dict[str, Any]) -> None:
        for key, deployment_id, expires in event.get("entries", ()):
            self._store(int(key, 16), str(deployment_id), float(expires))

    async def _flush_loop(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            await asyncio.sleep(FLUSH_INTERVAL)  # gather a batch
            self._wake.clear()
            batch, self._pending = self._pending, []
            if batch and self.link is not None:
                self.link.announce({"type": "affinity", "entries": batch})
