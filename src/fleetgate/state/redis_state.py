"""Runtime state shared between replicas through Redis.

Reads stay synchronous on a local mirror (a `MemoryState`), so routing never awaits.
Every change to a deployment's circuit, cooldown or EMAs is applied locally first, then
queued to Redis (a hash other replicas load at start-up, and a pub/sub event they apply
at once). In-flight counts stay per replica: each replica only knows its own, which is
what its own least-loaded ordering can act on. Without Redis this is a `MemoryState`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fleetgate.config.schema import CircuitConfig
from fleetgate.state.redis_link import RedisLink
from fleetgate.state.runtime import MemoryState

_SHARED = (
    "consecutive_failures",
    "open_until",
    "open_reason",
    "ttft_ema",
    "tps_ema",
    "latency_ema",
)


class RedisState(MemoryState):
    def __init__(self) -> None:
        super().__init__()
        self.link: RedisLink | None = None
        self._load: asyncio.Task[Any] | None = None

    def attach(self, link: RedisLink) -> None:
        self.link = link
        link.on("health", self._apply)
        link.on("resync", lambda _event: self._load_snapshot())
        self._load = asyncio.get_running_loop().create_task(self._load_snapshot())

    async def _load_snapshot(self) -> None:
        assert self.link is not None
        for dep_id, fields in (await self.link.read_hash("health")).items():
            self._apply({"deployment": dep_id, "fields": fields})

    def _apply(self, event: dict[str, Any]) -> None:
        h = self.health(str(event["deployment"]))
        for name, value in event["fields"].items():
            if name in _SHARED:
                setattr(h, name, value)
        if h.open_until and h.open_until > time.time():
            h.probing = False

    def _share(self, deployment_id: str) -> None:
        if self.link is None:
            return
        h = self.health(deployment_id)
        fields = {name: getattr(h, name) for name in _SHARED}
        self.link.store_hash("health", deployment_id, fields)
        self.link.announce({"type": "health", "deployment": deployment_id, "fields": fields})

    def record_success(
        self, deployment_id: str, ttft: float | None, latency: float, tokens: int | None
    ) -> None:
        super().record_success(deployment_id, ttft, latency, tokens)
        self._share(deployment_id)

    def record_failure(self, deployment_id: str, now: float, circuit: CircuitConfig) -> None:
        super().record_failure(deployment_id, now, circuit)
        self._share(deployment_id)

    def record_rate_limit(
        self, deployment_id: str, now: float, retry_after: float | None, circuit: CircuitConfig
    ) -> float:
        until = super().record_rate_limit(deployment_id, now, retry_after, circuit)
        self._share(deployment_id)
        return until
