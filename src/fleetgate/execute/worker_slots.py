"""Per-worker concurrency limits with a bounded queue.

A provider with `concurrency_limit` gets that many request slots. A request that finds
them taken waits in the provider's queue (at most `queue_size` waiters, each at most
`queue_timeout_seconds`); when the queue is full the worker is skipped at once, and when
every candidate was skipped the client gets 429 `gateway_queue_full` — never an unbounded
wait. A released slot goes straight to the oldest waiter (first come, first served).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

from fleetgate.execute.saturation import Saturation
from fleetgate.fleet import Provider


class SlotPool:
    def __init__(self, limit: int, queue_size: int, provider_id: str = "") -> None:
        self.limit = limit
        self.queue_size = queue_size
        self.saturation = Saturation(provider_id, "slots (concurrency_limit)")
        self.inflight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return sum(1 for f in self._waiters if not f.done())

    def try_take(self) -> bool:
        if self.inflight < self.limit and not self.waiting:
            self.inflight += 1
            return True
        return False

    def queue_full(self) -> bool:
        return self.waiting >= self.queue_size

    async def wait(self, seconds: float) -> bool:
        """Wait in the queue for a slot; False when `seconds` passed first."""
        self.saturation.note(self.limit)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        got = False
        try:
            async with asyncio.timeout(seconds):
                await fut
            got = True
            return True
        except TimeoutError:
            return False
        finally:
            if not got:
                if fut.done() and not fut.cancelled():
                    self.release()  # handed a slot just as we gave up: pass it on
                else:
                    fut.cancel()
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(fut)

    def release(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)  # the slot moves to the waiter; inflight is unchanged
                return
        self.inflight -= 1


class WorkerSlots:
    """The slot pools of all providers that have a `concurrency_limit`."""

    def __init__(self) -> None:
        self._pools: dict[str, SlotPool] = {}

    def for_provider(self, provider: Provider) -> SlotPool | None:
        if provider.concurrency_limit is None:
            return None
        pool = self._pools.get(provider.id)
        if pool is None:
            pool = self._pools[provider.id] = SlotPool(
                provider.concurrency_limit, provider.queue_size, provider.id
            )
        else:  # a new fleet snapshot may have changed the limits
            pool.limit, pool.queue_size = provider.concurrency_limit, provider.queue_size
        return pool
