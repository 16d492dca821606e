"""`auto`'s memory of which tier each conversation got, so a conversation does not flap.

Keys are hashes of the conversation key (a header or the `user` field), never the raw
value. `MemoryStickyTiers` is a bounded LRU with a TTL refreshed on every use; a shared
implementation keeps the same two methods.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from fleetgate.fleet import Fleet


def conversation_hash(key: str) -> str:
    return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


class StickyTiers(Protocol):
    def get(self, key: str, now: float) -> str | None: ...

    def put(self, key: str, tier: str, now: float) -> None: ...


class MemoryStickyTiers:
    """At most `max_entries` conversations; an entry unused for `ttl` seconds is forgotten."""

    def __init__(self, ttl: float = 1800.0, max_entries: int = 100_000) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._entries: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def get(self, key: str, now: float) -> str | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        tier, expires = entry
        if expires <= now:
            del self._entries[key]
            return None
        return tier

    def put(self, key: str, tier: str, now: float) -> None:
        self._entries[key] = (tier, now + self.ttl)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def configure(self, ttl: float, max_entries: int) -> None:
        """Apply new limits (a reloaded config); entries keep their expiry."""
        self.ttl = ttl
        self.max_entries = max_entries
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


class ReadOnlySticky:
    """A view that reads but never writes: explain shows the plan without changing memory."""

    def __init__(self, inner: StickyTiers) -> None:
        self._inner = inner

    def get(self, key: str, now: float) -> str | None:
        return self._inner.get(key, now)

    def put(self, key: str, tier: str, now: float) -> None:
        return None


def sticky_tiers_for(fleet: Fleet) -> MemoryStickyTiers:
    """The sticky-tier memory `auto` uses, sized by the fleet's `auto.stickiness`."""
    store = MemoryStickyTiers()
    configure_sticky(store, fleet)
    return store


def configure_sticky(store: Any, fleet: Fleet) -> None:
    auto = fleet.config.auto
    if auto is not None and isinstance(store, MemoryStickyTiers):
        store.configure(auto.stickiness.ttl_seconds, auto.stickiness.max_entries)
