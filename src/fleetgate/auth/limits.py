"""Per-key rate-limit counters in fixed one-minute windows, local or shared through Redis.

Fixed windows make the Redis counters exact across replicas with one atomic INCR each:
a limit of N admits N requests per window in the whole cluster.
"""

from __future__ import annotations

import time
from typing import Protocol

WINDOW = 60.0


def _window(now: float) -> int:
    return int(now // WINDOW)


def retry_after(now: float) -> float:
    return WINDOW - (now % WINDOW)


class Limiter(Protocol):
    async def hit(self, name: str, limit: int, now: float) -> bool:
        """Count one event; False when it is over `limit` in this window."""
        ...

    async def add(self, name: str, amount: int, now: float) -> None: ...

    async def used(self, name: str, now: float) -> int: ...


class MemoryLimiter:
    def __init__(self) -> None:
        self._counts: dict[tuple[str, int], int] = {}

    def _prune(self, window: int) -> None:
        if len(self._counts) > 10_000:
            self._counts = {k: v for k, v in self._counts.items() if k[1] >= window}

    async def hit(self, name: str, limit: int, now: float | None = None) -> bool:
        window = _window(time.time() if now is None else now)
        self._prune(window)
        count = self._counts.get((name, window), 0) + 1
        self._counts[(name, window)] = count
        return count <= limit

    async def add(self, name: str, amount: int, now: float | None = None) -> None:
        window = _window(time.time() if now is None else now)
        self._counts[(name, window)] = self._counts.get((name, window), 0) + amount

    async def used(self, name: str, now: float | None = None) -> int:
        return self._counts.get((name, _window(time.time() if now is None else now)), 0)
