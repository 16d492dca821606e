"""The log line that says a provider's gateway-side limit makes requests wait.

Requests wait in the gateway only behind a limit: the provider's pooled connections
(`max_concurrency`, or its kind's bound) or its worker slots (`concurrency_limit`). Each
wait is measured (`Attempt.pool_wait`, `fleetgate_pool_wait_seconds`); the pool says so in
the log as well, once a minute at most, so a busy pool does not flood it.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("fleetgate.execute")

EVERY_SECONDS = 60.0  # the least time between two lines of one pool


class Saturation:
    """One pool's log line: `limit` names what is full ("connections (max_concurrency)")."""

    __slots__ = ("_last", "limit", "provider_id")

    def __init__(self, provider_id: str, limit: str) -> None:
        self.provider_id = provider_id
        self.limit = limit
        self._last: float | None = None

    def note(self, size: int) -> None:
        """A request found all `size` places taken and waits."""
        now = time.monotonic()
        if self._last is not None and now - self._last < EVERY_SECONDS:
            return
        self._last = now
        log.warning(
            "provider %s saturated: all %d of its %s are taken, requests wait in the gateway "
            "(fleetgate_pool_wait_seconds); raise the limit if the upstream can take more",
            self.provider_id,
            size,
            self.limit,
        )
